#!/usr/bin/env python3
"""Runs Vigil's benchmark workloads on collectd 5.12 and prints JSON results.

    python3 scripts/collectd/run.py --workload flood-json --count 2000000 --repeat 3
    python3 scripts/collectd/run.py --workload idle-1s --idle-seconds 60

One JSON object per workload is printed on stdout, one per line; progress
goes to stderr. Standard library only. See README.md beside this file for
what each workload is and what its figures mean.

Nothing outside a temporary directory is touched: each run gets its own
BaseDir, PIDFile, PluginDir (copies of collectd's plugins plus the
benchmark's flood.so), DataDir and log file, and the directory is removed
afterwards (--keep keeps it).
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TICKS = os.sysconf("SC_CLK_TCK")
MIB = 1024.0 * 1024.0

WORKLOADS = {
    # idle: collectd's plugins for the facilities Vigil's standard monitors
    # cover, at the same interval, writing through write_log (JSON) to a file.
    "idle-1s": {"kind": "idle", "interval": 1.0},
    "idle-100ms": {"kind": "idle", "interval": 0.1},
    # throughput: the flood plugin dispatching into one writer.
    "flood-null": {"kind": "flood", "sink": "null"},
    "flood-json": {"kind": "flood", "sink": "json"},
    "flood-json-stdout": {"kind": "flood", "sink": "json-stdout"},
    "flood-csv": {"kind": "flood", "sink": "csv"},
    "flood-network": {"kind": "flood", "sink": "network"},
}
DEFAULT_WORKLOADS = ["idle-1s", "idle-100ms", "flood-null", "flood-json",
                     "flood-csv", "flood-network"]

JSON_MARK = b'"plugin":"flood"'
TOO_OLD = b"uc_update: Value too old"


def log(msg):
    print("[collectd-bench] " + msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------- /proc reads

def proc_cpu_seconds(pid):
    """utime+stime of the whole process (dead threads included), 1/HZ s."""
    with open("/proc/%d/stat" % pid) as f:
        data = f.read()
    fields = data[data.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def proc_task_runtime(pid):
    """Sum of the live threads' on-CPU time in ns (/proc/PID/task/*/schedstat):
    nanosecond resolution, but threads that exited are not included."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def proc_kib(path, keys):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, rest = line.partition(":")
                if k in keys:
                    out[k] = int(rest.split()[0])
    except OSError:
        pass
    return out


def proc_status_memory(pid):
    """Cheap (counters only): safe to sample often while collectd is busy."""
    st = proc_kib("/proc/%d/status" % pid, ("VmRSS", "VmHWM", "RssAnon"))
    return st.get("VmRSS"), st.get("VmHWM"), st.get("RssAnon")


def proc_memory(pid):
    """Includes smaps_rollup, which walks the page tables under the mmap lock
    (16 ms at 1.3 GiB here, stalling collectd's malloc/free meanwhile): read
    it at the points of measurement, not in a tight loop on a big process."""
    st = proc_kib("/proc/%d/status" % pid, ("VmRSS", "VmHWM", "Threads"))
    sm = proc_kib("/proc/%d/smaps_rollup" % pid,
                  ("Private_Dirty", "Private_Clean", "Pss", "Rss"))
    return {
        "rss_kib": st.get("VmRSS"),
        "hwm_kib": st.get("VmHWM"),
        "private_dirty_kib": sm.get("Private_Dirty"),
        "private_clean_kib": sm.get("Private_Clean"),
        "pss_kib": sm.get("Pss"),
    }


def udp_drops(port):
    """The drops column of /proc/net/udp for 127.0.0.1:port."""
    want = "0100007F:%04X" % port
    try:
        with open("/proc/net/udp") as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[1] == want:
                    return int(cols[-1])
    except (OSError, StopIteration, ValueError):
        pass
    return None


def mib(kib):
    return None if kib is None else round(kib / 1024.0, 3)


# ------------------------------------------------------------ output counting

class IncrementalCounter:
    """Counts, in a growing file, complete lines containing a marker, reading
    each byte once."""

    def __init__(self, path, mark):
        self.path, self.mark = path, mark
        self.offset = 0
        self.tail = b""
        self.count = 0
        self.too_old = 0
        self.lines = 0

    def size(self):
        try:
            return os.stat(self.path).st_size
        except OSError:
            return 0

    def update(self):
        try:
            f = open(self.path, "rb")
        except OSError:
            return self.count
        with f:
            f.seek(self.offset)
            while True:
                chunk = f.read(8 << 20)
                if not chunk:
                    break
                self.offset += len(chunk)
                data = self.tail + chunk
                cut = data.rfind(b"\n") + 1
                whole, self.tail = data[:cut], data[cut:]
                self.count += whole.count(self.mark)
                self.too_old += whole.count(TOO_OLD)
                self.lines += whole.count(b"\n")
        return self.count

    def mtime_ns(self):
        try:
            return os.stat(self.path).st_mtime_ns
        except OSError:
            return None


class CsvCounter:
    """Counts data lines (all lines minus the `epoch,...` header) in the csv
    plugin's files for the flood plugin: DataDir/HOST/flood-N/TYPE-DATE."""

    def __init__(self, datadir):
        self.datadir = datadir
        self.files = {}  # path -> [offset, newlines, header_seen]

    def paths(self):
        out = []
        host = os.path.join(self.datadir, "bench")
        try:
            for d in os.listdir(host):
                if d.startswith("flood-"):
                    p = os.path.join(host, d)
                    out.extend(os.path.join(p, f) for f in os.listdir(p))
        except OSError:
            pass
        return out

    def size(self):
        total = 0
        for p in self.paths():
            try:
                total += os.stat(p).st_size
            except OSError:
                pass
        return total

    def update(self):
        for p in self.paths():
            st = self.files.setdefault(p, [0, 0, False])
            with open(p, "rb") as f:
                f.seek(st[0])
                while True:
                    chunk = f.read(8 << 20)
                    if not chunk:
                        break
                    if st[0] == 0 and chunk.startswith(b"epoch"):
                        st[2] = True
                    st[0] += len(chunk)
                    st[1] += chunk.count(b"\n")
        return sum(n - (1 if hdr else 0) for _, n, hdr in self.files.values())

    def mtime_ns(self):
        m = None
        for p in self.paths():
            try:
                t = os.stat(p).st_mtime_ns
            except OSError:
                continue
            m = t if m is None or t > m else m
        return m


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------- configs

def conf_header(tmp, interval, args):
    lines = [
        'Hostname "bench"',
        "FQDNLookup false",
        'BaseDir "%s"' % tmp,
        'PIDFile "%s/collectd.pid"' % tmp,
        'PluginDir "%s/plugins"' % tmp,
        'TypesDB "%s"' % args.types_db,
        "Interval %g" % interval,
    ]
    if args.write_threads:
        lines.append("WriteThreads %d" % args.write_threads)
    if args.read_threads:
        lines.append("ReadThreads %d" % args.read_threads)
    return lines


def conf_logfile(path, level):
    return ["LoadPlugin logfile",
            "<Plugin logfile>",
            "  LogLevel %s" % level,
            '  File "%s"' % path,
            "  Timestamp true",
            "</Plugin>"]


IDLE_PLUGIN_CONF = {
    # Vigil's cpu monitor reports one event of system-wide shares (per_cpu:
    # false): the same aggregation in collectd is one percentage per state.
    "cpu": ["<Plugin cpu>", "  ReportByCpu false", "  ReportByState true",
            "  ValuesPercentage true", "</Plugin>"],
    # Vigil's memory monitor reports bytes and used ratios.
    "memory": ["<Plugin memory>", "  ValuesAbsolute true",
               "  ValuesPercentage true", "</Plugin>"],
}


def idle_config(tmp, workload, args):
    w = WORKLOADS[workload]
    c = conf_header(tmp, w["interval"], args)
    c += conf_logfile(os.path.join(tmp, "collectd.log"), "info")
    for p in args.idle_plugins:
        c.append("LoadPlugin %s" % p)
        c += IDLE_PLUGIN_CONF.get(p, [])
    if args.idle_writer in ("write_log", "both"):
        c += ["LoadPlugin write_log", "<Plugin write_log>", "  Format JSON",
              "</Plugin>"]
    if args.idle_writer in ("csv", "both"):
        c += ["LoadPlugin csv", "<Plugin csv>",
              '  DataDir "%s/csv"' % tmp, "  StoreRates false", "</Plugin>"]
    plugins = ["logfile"] + list(args.idle_plugins)
    if args.idle_writer in ("write_log", "both"):
        plugins.append("write_log")
    if args.idle_writer in ("csv", "both"):
        plugins.append("csv")
    return "\n".join(c) + "\n", plugins


def flood_config(tmp, workload, args, port=None):
    sink = WORKLOADS[workload]["sink"]
    c = conf_header(tmp, 1.0, args)
    if sink == "json":
        c += conf_logfile(os.path.join(tmp, "out.log"), "info")
    elif sink == "json-stdout":
        c += conf_logfile("stdout", "info")
    else:
        # Only collectd's own warnings: at "info" the cache's "value too old"
        # notices (see README) would be written, one fopen/fclose each.
        c += conf_logfile(os.path.join(tmp, "collectd.log"), args.log_level)
    # flood is loaded before the writers so that its shutdown callback (which
    # joins its threads) runs before theirs.
    c += ["LoadPlugin flood", "<Plugin flood>",
          "  Count %d" % args.count,
          "  Rate %g" % args.rate,
          "  Fields %d" % args.fields,
          "  Threads %d" % args.threads,
          '  DoneFile "%s/flood.done"' % tmp,
          "  SplitFields %s" % ("true" if args.split_fields else "false"),
          "  Direct %s" % ("true" if args.direct else "false")]
    if sink == "null":
        c.append('  NullWriter "%s/null.status"' % tmp)
    c.append("</Plugin>")
    plugins = ["logfile", "flood"]
    if sink in ("json", "json-stdout"):
        c += ["LoadPlugin write_log", "<Plugin write_log>", "  Format JSON",
              "</Plugin>"]
        plugins.append("write_log")
    elif sink == "csv":
        c += ["LoadPlugin csv", "<Plugin csv>", '  DataDir "%s/csv"' % tmp,
              "  StoreRates false", "</Plugin>"]
        plugins.append("csv")
    elif sink == "network":
        c += ["LoadPlugin network", "<Plugin network>",
              '  Server "127.0.0.1" "%d"' % port, "</Plugin>"]
        plugins.append("network")
    return "\n".join(c) + "\n", plugins


# ------------------------------------------------------------------- process

def prepare_dir(args, plugins):
    tmp = tempfile.mkdtemp(prefix="collectd-bench-", dir=args.tmpdir)
    pdir = os.path.join(tmp, "plugins")
    os.mkdir(pdir)
    # collectd refuses symlinks in PluginDir ("is not a regular file"), so
    # the plugins are copied.
    for p in plugins:
        src = (os.path.join(args.build_dir, "flood.so") if p == "flood"
               else os.path.join(args.plugin_source, p + ".so"))
        shutil.copy2(src, os.path.join(pdir, p + ".so"))
        missing = missing_libraries(src)
        if missing:
            shutil.rmtree(tmp, ignore_errors=True)
            hint = (" (Debian: apt-get install libyajl2 -- collectd-core only "
                    "suggests it)" if "libyajl" in " ".join(missing) else "")
            raise RuntimeError("%s needs %s, which is not installed%s"
                               % (src, ", ".join(missing), hint))
    return tmp


def missing_libraries(path):
    try:
        out = subprocess.run(["ldd", path], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split()[0] for line in out.splitlines() if "not found" in line]


def spawn(args, tmp, conf_text):
    conf = os.path.join(tmp, "collectd.conf")
    with open(conf, "w") as f:
        f.write(conf_text)
    out = open(os.path.join(tmp, "stdout.txt"), "wb")
    err = open(os.path.join(tmp, "stderr.txt"), "wb")
    t_spawn_ns = time.time_ns()
    t_spawn_mono = time.monotonic()
    proc = subprocess.Popen([args.collectd, "-f", "-C", conf],
                            stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                            cwd=tmp)
    out.close()
    err.close()
    return proc, t_spawn_ns, t_spawn_mono


def reap(proc, timeout):
    """SIGTERM, then wait4 for the rusage (whole process, all threads)."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    killed = False
    while True:
        try:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:
            return None, None, killed
        if pid != 0:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return ru.ru_utime + ru.ru_stime, ru, killed
        if time.monotonic() > deadline and not killed:
            proc.kill()
            killed = True
        time.sleep(0.01)


def early_exit_error(proc, tmp):
    msg = "collectd exited with status %s during the run" % proc.returncode
    for name in ("stderr.txt", "collectd.log", "stdout.txt", "out.log"):
        p = os.path.join(tmp, name)
        if os.path.exists(p):
            with open(p, "rb") as f:
                f.seek(max(0, os.path.getsize(p) - 2000))
                tail = f.read().decode("utf-8", "replace").strip()
            if tail:
                msg += "; %s: %s" % (name, tail[-1500:])
    return msg


def cleanup(args, tmp):
    if args.keep:
        log("kept %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------- idle

def run_idle(args, workload):
    interval = WORKLOADS[workload]["interval"]
    conf_text, plugins = idle_config("@TMP@", workload, args)
    tmp = prepare_dir(args, plugins)
    conf_text = conf_text.replace("@TMP@", tmp)
    proc, t_spawn_ns, t0_mono = spawn(args, tmp, conf_text)
    result = {}
    try:
        time.sleep(args.warmup)
        if proc.poll() is not None:
            raise RuntimeError(early_exit_error(proc, tmp))
        pid = proc.pid
        w0, c0 = time.monotonic(), proc_task_runtime(pid)
        s0 = proc_cpu_seconds(pid)
        max_pd = 0
        end = w0 + args.idle_seconds
        while True:
            now = time.monotonic()
            if now >= end:
                break
            time.sleep(min(1.0, end - now))
            if proc.poll() is not None:
                raise RuntimeError(early_exit_error(proc, tmp))
            m = proc_memory(pid)
            max_pd = max(max_pd, m["private_dirty_kib"] or 0)
        w1, c1 = time.monotonic(), proc_task_runtime(pid)
        s1 = proc_cpu_seconds(pid)
        mem = proc_memory(pid)
        threads = proc_kib("/proc/%d/status" % pid, ("Threads",)).get("Threads")
        cpu_total, ru, killed = reap(proc, 30)
        wall_total = time.monotonic() - t0_mono
        counter = IncrementalCounter(os.path.join(tmp, "collectd.log"),
                                     b'"values":[')
        lines = counter.update() if args.idle_writer in ("write_log", "both") else None
        window = w1 - w0
        result = {
            "cpu_percent": round(100.0 * (c1 - c0) / window, 4),
            "cpu_percent_ticks": round(100.0 * (s1 - s0) / window, 4),
            "cpu_percent_incl_startup": (round(100.0 * cpu_total / wall_total, 4)
                                         if cpu_total is not None else None),
            "cpu_seconds_window": round(c1 - c0, 6),
            "window_seconds": round(window, 3),
            "rss_mib": mib(mem["rss_kib"]),
            "peak_rss_mib": mib(mem["hwm_kib"]),
            "private_dirty_mib": mib(mem["private_dirty_kib"]),
            "private_dirty_max_mib": mib(max(max_pd, mem["private_dirty_kib"] or 0)),
            "private_clean_mib": mib(mem["private_clean_kib"]),
            "pss_mib": mib(mem["pss_kib"]),
            "threads": threads,
            "value_lists_written": lines,
            "killed": killed,
        }
        return result
    finally:
        if proc.poll() is None:
            reap(proc, 5)
        cleanup(args, tmp)


# --------------------------------------------------------------------- flood

def free_udp_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_flood(args, workload):
    sink = WORKLOADS[workload]["sink"]
    if args.count <= 0:
        raise RuntimeError("flood workloads need --count > 0")
    lists_per_event = args.fields if args.split_fields else 1
    values_per_list = 1 if args.split_fields else args.fields
    expected_lists = args.count * args.threads * lists_per_event
    expected_values = expected_lists * values_per_list

    port = free_udp_port() if sink == "network" else None
    conf_text, plugins = flood_config("@TMP@", workload, args, port)
    tmp = prepare_dir(args, plugins)
    conf_text = conf_text.replace("@TMP@", tmp)

    receiver = None
    status_path = os.path.join(tmp, "net.status")
    if sink == "network":
        receiver = subprocess.Popen(
            [os.path.join(args.build_dir, "netcount"), str(port), status_path],
            stdin=subprocess.DEVNULL)
        for _ in range(200):
            if os.path.exists(status_path):
                break
            time.sleep(0.01)

    if sink == "json":
        counter = IncrementalCounter(os.path.join(tmp, "out.log"), JSON_MARK)
    elif sink == "json-stdout":
        counter = IncrementalCounter(os.path.join(tmp, "stdout.txt"), JSON_MARK)
    elif sink == "csv":
        counter = CsvCounter(os.path.join(tmp, "csv"))
    else:
        counter = None

    proc, t_spawn_ns, t_spawn_mono = spawn(args, tmp, conf_text)
    pid = proc.pid
    done = None
    delivered_lists = 0
    t_end_ns = None           # CLOCK_REALTIME of the last delivery
    complete = False
    flushes = 0
    flush_state = None        # receiver status just before the last SIGUSR1
    end_packets = 0
    max_anon = 0
    last_mem = 0.0
    last_size, last_change = -1, time.monotonic()
    stall_reason = None
    mem = {}
    cpu_at_delivery = None
    try:
        deadline = t_spawn_mono + args.timeout
        while True:
            now = time.monotonic()
            if proc.poll() is not None:
                raise RuntimeError(early_exit_error(proc, tmp))
            if now - last_mem >= args.sample_interval:
                anon = proc_status_memory(pid)[2]
                if anon is not None:
                    max_anon = max(max_anon, anon)
                last_mem = now
            if done is None:
                done = read_json(os.path.join(tmp, "flood.done"))
                if done is not None:
                    last_change = now
            if done is not None:
                if sink == "null":
                    st = read_json(os.path.join(tmp, "null.status"))
                    if st is not None:
                        delivered_lists = st["value_lists"]
                        t_end_ns = st["last_ns"]
                        complete = True
                elif sink == "network":
                    st = read_json(status_path) or {}
                    n = st.get("value_lists", 0)
                    if n != last_size:
                        last_size, last_change = n, now
                    delivered_lists = n
                    end_packets = st.get("packets", 0)
                    if st.get("last_ns"):
                        t_end_ns = st["last_ns"]
                    if n >= expected_lists:
                        complete = True
                    elif (now - last_change >= 0.1 and
                          (flush_state is None or
                           flush_state.get("packets") != st.get("packets"))):
                        # collectd's network plugin holds a partly filled
                        # packet until it is full or flushed: SIGUSR1 makes
                        # collectd flush all plugins. Sent again after every
                        # quiet spell that follows new packets (a pause in
                        # the middle of the drain is not the end).
                        flush_state = st
                        flushes += 1
                        proc.send_signal(signal.SIGUSR1)
                else:
                    size = counter.size()
                    if size != last_size:
                        last_size, last_change = size, now
                    elif now - last_change >= args.settle:
                        delivered_lists = counter.update()
                        t_end_ns = counter.mtime_ns()
                        if delivered_lists >= expected_lists:
                            complete = True
                if complete:
                    cpu_at_delivery = proc_cpu_seconds(pid)
                    mem = proc_memory(pid)
                    break
                if now - last_change > args.stall_seconds:
                    stall_reason = ("output stopped growing for %gs at %d of %d "
                                    "value lists" % (args.stall_seconds,
                                                     delivered_lists,
                                                     expected_lists))
                    break
            if now > deadline:
                stall_reason = "timeout after %gs" % args.timeout
                break
            time.sleep(0.01 if done is not None else 0.02)

        if not complete:
            cpu_at_delivery = proc_cpu_seconds(pid)
            mem = proc_memory(pid)
        t_term_mono = time.monotonic()
        cpu_total, ru, killed = reap(proc, 60)
        t_exit_mono = time.monotonic()

        drops = None
        recv_cpu = None
        if sink == "network":
            time.sleep(0.2)  # a last packet flushed at shutdown
            drops = udp_drops(port)
            receiver.send_signal(signal.SIGTERM)
            _, _, rru = os.wait4(receiver.pid, 0)
            receiver.returncode = 0
            recv_cpu = rru.ru_utime + rru.ru_stime
            st = read_json(status_path) or {}
            final_lists = st.get("value_lists", 0)
            final_values = st.get("values", 0)
        elif sink == "null":
            final_lists = delivered_lists
            final_values = final_lists * values_per_list
        else:
            final_lists = counter.update()
            final_values = final_lists * values_per_list

        # The rate counts what had been delivered by t_end, the time of the
        # last delivery the runner saw before it stopped collectd (file mtime,
        # packet arrival, null writer's clock) -- not what came during the
        # shutdown. When the network run needed a flush, the partial packet
        # sent on SIGUSR1 waited for the runner's stall detection; the rate
        # then ends at the last packet before the flush and counts only what
        # that had delivered.
        rate_lists = delivered_lists
        if (sink == "network" and flush_state is not None and
                flush_state.get("last_ns") and
                delivered_lists > flush_state.get("value_lists", 0) and
                end_packets <= flush_state.get("packets", 0) + 1):
            # the last delivery was the packet the runner's flush released
            rate_lists = flush_state["value_lists"]
            t_end_ns = flush_state["last_ns"]
        wall = (t_end_ns - t_spawn_ns) / 1e9 if t_end_ns else None
        rate_values = rate_lists * values_per_list
        first = (done or {}).get("first_dispatch_ns")
        last = (done or {}).get("last_dispatch_ns")
        too_old = None
        if isinstance(counter, IncrementalCounter):
            too_old = counter.too_old
        else:
            c2 = IncrementalCounter(os.path.join(tmp, "collectd.log"), TOO_OLD)
            c2.update()
            too_old = c2.too_old
        r = {
            "complete": complete and final_lists == expected_lists,
            "expected_values": expected_values,
            "delivered_values": final_values,
            "lost_values": expected_values - final_values,
            "expected_value_lists": expected_lists,
            "delivered_value_lists": final_lists,
            "values_per_s": round(rate_values / wall, 1) if wall else None,
            "value_lists_per_s": round(rate_lists / wall, 1) if wall else None,
            "wall_seconds": round(wall, 4) if wall else None,
            "wall_to_exit_seconds": round(t_exit_mono - t_spawn_mono, 4),
            "shutdown_seconds": round(t_exit_mono - t_term_mono, 4),
            "startup_seconds": (round((first - t_spawn_ns) / 1e9, 4)
                                if first else None),
            "dispatch_seconds": (round((last - first) / 1e9, 4)
                                 if first and last else None),
            "dispatch_value_lists_per_s": (
                round(done["dispatched"] / ((last - first) / 1e9), 1)
                if first and last and last > first else None),
            "refused_value_lists": (done or {}).get("refused"),
            "cpu_seconds": round(cpu_total, 4) if cpu_total is not None else None,
            "cpu_user_seconds": round(ru.ru_utime, 4) if ru else None,
            "cpu_system_seconds": round(ru.ru_stime, 4) if ru else None,
            "cpu_seconds_at_delivery": cpu_at_delivery,
            "cpu_seconds_per_million_values": (
                round(cpu_total / final_values * 1e6, 4)
                if cpu_total and final_values else None),
            "peak_rss_mib": mib(mem.get("hwm_kib")),
            "rss_at_delivery_mib": mib(mem.get("rss_kib")),
            "private_dirty_mib": mib(mem.get("private_dirty_kib")),
            "rss_anon_max_mib": mib(max_anon),
            "too_old_notices": too_old,
            "killed": killed,
        }
        if sink == "network":
            r["udp_drops"] = drops
            r["sigusr1_flushes"] = flushes
            r["receiver_cpu_seconds"] = round(recv_cpu, 4)
        if stall_reason:
            r["incomplete"] = stall_reason
        return r
    finally:
        if proc.poll() is None:
            reap(proc, 5)
        if receiver is not None and receiver.poll() is None:
            receiver.kill()
            receiver.wait()
        cleanup(args, tmp)


# ------------------------------------------------------------------- summary

def summarize(runs):
    keys = []
    for r in runs:
        for k, v in r.items():
            if k not in keys and isinstance(v, (int, float)) and not isinstance(v, bool):
                keys.append(k)
    out = {}
    for k in keys:
        vals = [r[k] for r in runs if isinstance(r.get(k), (int, float))
                and not isinstance(r.get(k), bool)]
        if vals:
            out[k] = {"median": statistics.median(vals), "min": min(vals),
                      "max": max(vals)}
    return out


def collectd_version(binary):
    try:
        out = subprocess.run([binary, "-h"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"collectd (\d+\.\d+\.\d+)", out)
    return m.group(1) if m else None


def build(args):
    if args.build_dir:
        return
    args.build_dir = tempfile.mkdtemp(prefix="collectd-bench-build-",
                                      dir=args.tmpdir)
    subprocess.run(["sh", os.path.join(HERE, "build.sh"), args.build_dir],
                   check=True, stdout=subprocess.DEVNULL)
    args._remove_build = True


def main():
    ap = argparse.ArgumentParser(
        description="collectd side of Vigil's benchmarks; JSON on stdout.")
    ap.add_argument("--workload", action="append",
                    help="one of %s (repeatable, or comma-separated); "
                         "default: %s" % (", ".join(WORKLOADS),
                                          ", ".join(DEFAULT_WORKLOADS)))
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per workload; median, min and max are reported")
    ap.add_argument("--count", type=int, default=1000000,
                    help="flood: value lists (events) per thread (default 1e6)")
    ap.add_argument("--fields", type=int, default=1,
                    help="flood: gauge values per value list (default 1)")
    ap.add_argument("--threads", type=int, default=1,
                    help="flood: dispatching threads (default 1)")
    ap.add_argument("--rate", type=float, default=0,
                    help="flood: value lists/s per thread, 0 = unpaced")
    ap.add_argument("--split-fields", action="store_true",
                    help="flood: dispatch each field as its own value list")
    ap.add_argument("--direct", action="store_true",
                    help="flood: plugin_write() instead of "
                         "plugin_dispatch_values() (no queue, no cache)")
    ap.add_argument("--idle-seconds", type=float, default=60,
                    help="idle: measured window (default 60)")
    ap.add_argument("--warmup", type=float, default=2,
                    help="idle: seconds after start before the window opens")
    ap.add_argument("--idle-plugins", default="cpu,memory,load",
                    help="idle: collectd read plugins (default cpu,memory,load;"
                         " e.g. add df,interface)")
    ap.add_argument("--idle-writer", default="write_log",
                    choices=["write_log", "csv", "both", "none"],
                    help="idle: where values go (default write_log JSON to a "
                         "log file)")
    ap.add_argument("--write-threads", type=int,
                    help="collectd WriteThreads (default: collectd's, 5)")
    ap.add_argument("--read-threads", type=int,
                    help="collectd ReadThreads (default: collectd's, 5)")
    ap.add_argument("--log-level", default="warning",
                    help="logfile level for the csv, network and null flood "
                         "workloads (default warning)")
    ap.add_argument("--settle", type=float, default=0.1,
                    help="seconds a file must stop growing before it is counted")
    ap.add_argument("--stall-seconds", type=float, default=10,
                    help="give up when the output stops growing this long")
    ap.add_argument("--timeout", type=float, default=1800,
                    help="per-run limit in seconds")
    ap.add_argument("--sample-interval", type=float, default=0.1,
                    help="flood: seconds between memory samples")
    ap.add_argument("--collectd", default=shutil.which("collectd") or "/usr/sbin/collectd")
    ap.add_argument("--plugin-source", default="/usr/lib/collectd",
                    help="where collectd's own plugins are copied from")
    ap.add_argument("--types-db", default="/usr/share/collectd/types.db")
    ap.add_argument("--build-dir",
                    help="use flood.so and netcount already built here by build.sh")
    ap.add_argument("--tmpdir", help="parent of the temporary directories")
    ap.add_argument("--keep", action="store_true",
                    help="keep each run's temporary directory")
    args = ap.parse_args()

    names = []
    for w in args.workload or DEFAULT_WORKLOADS:
        names += [n for n in w.split(",") if n]
    for n in names:
        if n not in WORKLOADS:
            ap.error("unknown workload %r; known: %s" % (n, ", ".join(WORKLOADS)))
    args.idle_plugins = [p for p in args.idle_plugins.split(",") if p]
    if not 1 <= args.fields <= 64:
        ap.error("--fields must be in 1..64")
    if not 1 <= args.threads <= 256:
        ap.error("--threads must be in 1..256")
    args._remove_build = False

    version = collectd_version(args.collectd)
    build(args)
    failed = False
    try:
        for name in names:
            w = WORKLOADS[name]
            runs = []
            for i in range(args.repeat):
                log("%s: run %d/%d" % (name, i + 1, args.repeat))
                try:
                    r = run_idle(args, name) if w["kind"] == "idle" else run_flood(args, name)
                except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                    r = {"error": str(e)}
                if "error" in r:
                    failed = True  # no figures; lost values are not failures
                log("%s: %s" % (name, json.dumps(r)))
                runs.append(r)
            obj = {"workload": name, "tool": "collectd", "version": version}
            if w["kind"] == "idle":
                obj["params"] = {"interval_seconds": w["interval"],
                                 "idle_seconds": args.idle_seconds,
                                 "warmup_seconds": args.warmup,
                                 "plugins": args.idle_plugins,
                                 "writer": args.idle_writer}
            else:
                obj["params"] = {"sink": w["sink"], "count": args.count,
                                 "fields": args.fields,
                                 "threads": args.threads, "rate": args.rate,
                                 "split_fields": args.split_fields,
                                 "direct": args.direct}
            obj["params"]["write_threads"] = args.write_threads
            obj["repeat"] = args.repeat
            obj["ok"] = all("error" not in r and r.get("complete", True)
                            for r in runs)
            # runs that lost values still have valid figures; runs with an
            # "error" (collectd failed) have none

            obj["summary"] = summarize([r for r in runs if "error" not in r])
            obj["runs"] = runs
            print(json.dumps(obj), flush=True)
    finally:
        if args._remove_build:
            shutil.rmtree(args.build_dir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
