#!/bin/sh
# Builds the benchmark's collectd plugin, flood_collectd.c, into OUTDIR/flood.so
# against collectd-dev's headers (Debian: /usr/include/collectd/...), and the
# network workload's receiver, netcount.c, into OUTDIR/netcount.
#
#   scripts/collectd/build.sh OUTDIR
#
# collectd loads OUTDIR/flood.so with `PluginDir OUTDIR` + `LoadPlugin flood`
# (run.py points PluginDir at a temp dir holding symlinks to this and to
# collectd's own plugins, so the system's plugin directory is never changed).
set -eu
if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
out=$1
mkdir -p "$out"
CC=${CC:-cc}
# collectd-dev installs its headers as <collectd/core/...> and
# <collectd/liboconfig/...> (configfile.h includes "liboconfig/oconfig.h", hence
# also -I$hdr/collectd); HAVE_CONFIG_H pulls in collectd/core/config.h as
# collectd's own plugins see it. Plugins never link against the daemon: the
# plugin_* symbols are resolved from the collectd executable at dlopen time.
hdr=${COLLECTD_INCLUDE:-/usr/include}
if [ ! -f "$hdr/collectd/core/daemon/plugin.h" ]; then
  echo "$0: $hdr/collectd/core/daemon/plugin.h not found; install collectd-dev" >&2
  exit 1
fi
$CC -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -shared -fPIC -pthread \
  -DHAVE_CONFIG_H -I"$hdr" -I"$hdr/collectd" \
  "$here/flood_collectd.c" -o "$out/flood.so" -lm
$CC -std=gnu11 -O2 -Wall -Wextra "$here/netcount.c" -o "$out/netcount"
echo "$out/flood.so"
echo "$out/netcount"
