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

extension FSRoot {
    /// Reads and parses `diskstats` under this root (the procfs root).
    public func diskStats() throws(ProbeError) -> DiskStats {
        DiskStats.parse(try readText("diskstats"))
    }

    /// Reads and parses `vmstat` under this root (the procfs root).
    public func vmStat() throws(ProbeError) -> VMStat {
        VMStat.parse(try readText("vmstat"))
    }

    /// The udev properties of block device `major:minor`, from
    /// `run/udev/data/b<major>:<minor>` under this root (the root file
    /// system); empty when udev has no file for it.
    public func udevBlockProperties(major: UInt32, minor: UInt32) -> UdevProperties {
        guard let text = try? readText("run/udev/data/b\(major):\(minor)") else { return UdevProperties() }
        return UdevProperties.parse(text)
    }
}
