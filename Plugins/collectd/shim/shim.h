/*
 * The collectd compatibility shim: collectd's daemon API (what
 * /usr/include/collectd declares and collectd's plugins import), written
 * for Vigil from the public headers of collectd-dev (MIT licensed; see
 * NOTICE in this directory). Built with cc into libvigil_collectd_shim.so,
 * which the `collectd` Vigil plugin loads RTLD_GLOBAL so that collectd's
 * plugins, loaded after it, bind to these names.
 *
 * Files:
 *   util.c        common.h string, parse and file utilities, utils_time,
 *                 utils_complain, utils_random, utils_subst,
 *                 notification meta, log severities
 *   containers.c  avltree, utils_llist, meta_data
 *   typesdb.c     types.db: plugin_get_ds, plugin_register_data_set
 *   cache.c       the value cache: uc_*
 *   registry.c    modules, registration, dispatch, logging, contexts,
 *                 threads, globals
 *   config.c      oconfig trees (from the manifest's JSON), cf_util_*
 *   stubs.c       thresholds and filter chains (load only)
 *
 * Every collectd name is exported with default visibility; vcd_* names are
 * the shim's own, hidden from plugins except the VCD_API ones the compat
 * plugin calls.
 */
#ifndef VIGIL_COLLECTD_SHIM_H
#define VIGIL_COLLECTD_SHIM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* strcasestr, pthread_setname_np, strerror_r's GNU form */
#endif

#include "collectd/core/daemon/collectd.h"
#include "collectd/core/daemon/plugin.h"
#include "collectd/core/utils/common/common.h"
#include "collectd/core/utils/avltree/avltree.h"
#include "collectd/core/utils/metadata/meta_data.h"
#include "collectd/core/daemon/utils_cache.h"
#include "collectd/core/daemon/utils_complain.h"
#include "collectd/core/daemon/utils_llist.h"
#include "collectd/core/daemon/utils_subst.h"
#include "collectd/core/daemon/utils_random.h"
#include "collectd/core/daemon/utils_threshold.h"
#include "collectd/core/daemon/filter_chain.h"
#include "collectd/core/daemon/globals.h"
#include "collectd/liboconfig/oconfig.h"

#define VCD_HIDDEN __attribute__((visibility("hidden")))
#define VCD_API __attribute__((visibility("default")))

/* ------------------------------------------------------------ typesdb.c */

/** Reads a types.db file and adds its types (a type already known is
 *  replaced, as collectd does for later files). 0, or -1 with a message
 *  "PATH:LINE: what is wrong" (or the open error) in `err`. */
VCD_HIDDEN int vcd_types_load(const char *path, char *err, size_t err_len);

/** As vcd_types_load, but a file that would redefine a type already known
 *  is refused ("PATH: redefines type NAME"): other monitors of the process
 *  use the known one. */
VCD_HIDDEN int vcd_types_load_new(const char *path, char *err, size_t err_len);

/* -------------------------------------------------------------- cache.c */

/** Records `vl` in the value cache (what uc_get_rate and friends answer
 *  from), computing each source's rate from the previous value. 0, or -1
 *  when `vl` is not newer than the cached value (collectd drops it: "value
 *  too old") or does not match `ds`. Thread safe. */
VCD_HIDDEN int vcd_cache_update(const data_set_t *ds, const value_list_t *vl);

/** The rates the cache holds for `vl` (after vcd_cache_update) into
 *  `rates[ds->ds_num]`: per second for counter/derive/absolute, the value
 *  for gauges, NAN where unknown (the first value of a counter). 0, or -1
 *  when not in the cache. */
VCD_HIDDEN int vcd_cache_rates(const data_set_t *ds, const value_list_t *vl, gauge_t *rates);

#endif
