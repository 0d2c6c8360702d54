/*
 * Thresholds and filter chains: collectd's daemon runs them between
 * dispatch and the write plugins. Vigil has its own (thresholds and rules
 * in the manifest), so these exist for plugins to link and load: the
 * threshold plugin finds no thresholds, match_* and target_* plugins
 * register with no chain to run them. Each says so once in the log.
 */
#include "shim.h"

c_avl_tree_t *threshold_tree;
pthread_mutex_t threshold_lock = PTHREAD_MUTEX_INITIALIZER;

threshold_t *threshold_get(const char *hostname, const char *plugin, const char *plugin_instance,
                           const char *type, const char *type_instance) {
    (void)hostname, (void)plugin, (void)plugin_instance, (void)type, (void)type_instance;
    return NULL;
}

threshold_t *threshold_search(const value_list_t *vl) {
    (void)vl;
    return NULL;
}

/* -1: no threshold configured for `vl` (collectd's "not found"). */
int ut_search_threshold(const value_list_t *vl, threshold_t *ret_threshold) {
    (void)vl, (void)ret_threshold;
    return -1;
}

static void say_once(int *said, const char *what, const char *name) {
    if (__atomic_exchange_n(said, 1, __ATOMIC_RELAXED)) return;
    NOTICE("%s \"%s\" is registered but never runs: Vigil has no collectd filter chains; use the manifest's "
           "thresholds and rules",
           what, name != NULL ? name : "");
}

int fc_register_match(const char *name, match_proc_t proc) {
    static int said;
    (void)proc;
    say_once(&said, "filter chain match", name);
    return 0;
}

int fc_register_target(const char *name, target_proc_t proc) {
    static int said;
    (void)proc;
    say_once(&said, "filter chain target", name);
    return 0;
}
