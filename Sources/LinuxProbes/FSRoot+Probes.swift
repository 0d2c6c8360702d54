extension FSRoot {
    /// Reads and parses `stat` under this root (the root is the procfs root);
    /// with `counters`, the lines after the CPU block too (see `ProcStat.parse`).
    public func procStat(counters: Bool = false) throws(ProbeError) -> ProcStat {
        try ProcStat.parse(readText("stat"), path: path("stat"), counters: counters)
    }

    /// Reads and parses `meminfo` under this root.
    public func memInfo() throws(ProbeError) -> MemInfo {
        try MemInfo.parse(readText("meminfo"), path: path("meminfo"))
    }

    /// Reads and parses `loadavg` under this root.
    public func loadAvg() throws(ProbeError) -> LoadAvg {
        try LoadAvg.parse(readText("loadavg"), path: path("loadavg"))
    }

    /// Reads and parses `pressure/<resource>` under this root, where
    /// `resource` is `"cpu"`, `"memory"` or `"io"` (also `"irq"` on 6.1+).
    /// Check `ProbeError.isUnavailable` to tell "no PSI here" from real failures.
    public func pressure(_ resource: String) throws(ProbeError) -> Pressure {
        let relative = "pressure/" + resource
        return try Pressure.parse(readText(relative), path: path(relative))
    }
}
