import Glibc
import LinuxProbes
import VigilKit

/// The kernel's virtual memory statistics, `<procfs>/vmstat`: every line
/// (matching `include`) as one field of a `sample` event, every poll —
/// node_exporter's vmstat collector.
///
/// The fields are the kernel's names. Those this plugin knows (the names of
/// Linux 6.18, and a few older ones) are declared: the `nr_*` levels and
/// `workingset_nodes` as gauges, the event counts (`pgfault`, `pswpin`,
/// `oom_kill`, `nr_dirtied`…) as counters. A line a newer kernel adds is
/// still reported, as an undeclared (dynamic) field; one an older kernel
/// lacks is absent. Values are the kernel's raw figures (a level that drifted
/// below zero is printed by the kernel as a number near 2^64): a value beyond
/// 2^63 is reported as 2^63 − 1. A garbled line is skipped, and so is a
/// name that cannot be a field name (anything but lowercase letters, digits
/// and `_`; the kernel writes none).
///
/// Units are the kernel's: most figures count pages (or events), `pgpgin`
/// and `pgpgout` count KiB.
final class VMStatMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "vmstat", version: "1.0.0",
        summary: "Virtual memory statistics from /proc/vmstat: page faults, paging and swapping, reclaim, OOM kills, page counts",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("sample", doc: "Every line of vmstat whose name matches `include`, as a field named as in the file, every poll.",
                      fields: VMStatMonitor.fields, policy: .samples, dynamicFields: true),
        ])

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        var include: [String] = ["*"]
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem; the figures are read from <procfs>/vmstat."),
            .option("include", \.include, doc: "Globs (fnmatch) on the names to report; node_exporter's default set is [oom_kill*, pgpg*, pswp*, pg*fault*]."))
    }

    /// The fields whose unit and meaning are said; the others are "a level"
    /// (in pages) or "a count since boot". A list searched by name rather
    /// than a dictionary, and no text made per name: built at load, the
    /// 175 declarations cost 600,000 instructions with a dictionary and
    /// interpolated docs.
    static let known: [FieldDecl] = [
        FieldDecl("pgfault", .int, unit: "faults", doc: "page faults, minor and major", counter: true),
        FieldDecl("pgmajfault", .int, unit: "faults", doc: "major page faults (the page had to be read from disk)", counter: true),
        FieldDecl("pgpgin", .int, unit: "KiB", doc: "data paged in from block devices", counter: true),
        FieldDecl("pgpgout", .int, unit: "KiB", doc: "data paged out to block devices", counter: true),
        FieldDecl("pswpin", .int, unit: "pages", doc: "pages swapped in", counter: true),
        FieldDecl("pswpout", .int, unit: "pages", doc: "pages swapped out", counter: true),
        FieldDecl("oom_kill", .int, unit: "processes", doc: "processes killed by the OOM killer", counter: true),
        FieldDecl("nr_free_pages", .int, unit: "pages", doc: "free pages"),
        FieldDecl("nr_dirty", .int, unit: "pages", doc: "pages waiting to be written back"),
        FieldDecl("nr_writeback", .int, unit: "pages", doc: "pages being written back"),
        FieldDecl("nr_kernel_stack", .int, unit: "KiB", doc: "memory of the kernel stacks (the kernel counts it in KiB, not pages)"),
        FieldDecl("workingset_nodes", .int, unit: "nodes", doc: "page cache tree nodes that hold shadow entries of evicted pages"),
        FieldDecl("pgsteal_kswapd", .int, unit: "pages", doc: "pages reclaimed by kswapd", counter: true),
        FieldDecl("pgsteal_direct", .int, unit: "pages", doc: "pages reclaimed directly by allocating tasks", counter: true),
        FieldDecl("pgscan_kswapd", .int, unit: "pages", doc: "pages scanned by kswapd", counter: true),
        FieldDecl("pgscan_direct", .int, unit: "pages", doc: "pages scanned directly by allocating tasks", counter: true),
        FieldDecl("allocstall_normal", .int, unit: "stalls", doc: "allocations that stalled for direct reclaim (normal zone)", counter: true),
        FieldDecl("pgfree", .int, unit: "pages", doc: "pages freed", counter: true),
    ]

    /// Levels: pages in a state now.
    static let gauges = [
        "nr_free_pages", "nr_free_pages_blocks", "nr_zone_inactive_anon", "nr_zone_active_anon", "nr_zone_inactive_file",
        "nr_zone_active_file", "nr_zone_unevictable", "nr_zone_write_pending", "nr_mlock", "nr_zspages", "nr_free_cma",
        "nr_inactive_anon", "nr_active_anon", "nr_inactive_file", "nr_active_file", "nr_unevictable", "nr_slab_reclaimable",
        "nr_slab_unreclaimable", "nr_isolated_anon", "nr_isolated_file", "workingset_nodes", "nr_anon_pages", "nr_mapped",
        "nr_file_pages", "nr_dirty", "nr_writeback", "nr_shmem", "nr_shmem_hugepages", "nr_shmem_pmdmapped", "nr_file_hugepages",
        "nr_file_pmdmapped", "nr_anon_transparent_hugepages", "nr_kernel_misc_reclaimable", "nr_kernel_stack",
        "nr_page_table_pages", "nr_sec_page_table_pages", "nr_iommu_pages", "nr_swapcached", "nr_hugetlb", "nr_balloon_pages",
        "nr_kernel_file_pages", "nr_dirty_threshold", "nr_dirty_background_threshold", "nr_memmap_pages", "nr_memmap_boot_pages",
        "nr_unstable",
    ]

    /// Counts since boot.
    static let counters = [
        "numa_hit", "numa_miss", "numa_foreign", "numa_interleave", "numa_local", "numa_other", "workingset_refault_anon",
        "workingset_refault_file", "workingset_activate_anon", "workingset_activate_file", "workingset_restore_anon",
        "workingset_restore_file", "workingset_nodereclaim", "nr_vmscan_write", "nr_vmscan_immediate_reclaim", "nr_dirtied",
        "nr_written", "nr_throttled_written", "nr_foll_pin_acquired", "nr_foll_pin_released", "pgpromote_success",
        "pgpromote_candidate", "pgpromote_candidate_nrl", "pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged",
        "pgdemote_proactive", "pgpgin", "pgpgout", "pswpin", "pswpout", "pgalloc_dma", "pgalloc_dma32", "pgalloc_normal",
        "pgalloc_movable", "pgalloc_device", "allocstall_dma", "allocstall_dma32", "allocstall_normal", "allocstall_movable",
        "allocstall_device", "pgskip_dma", "pgskip_dma32", "pgskip_normal", "pgskip_movable", "pgskip_device", "pgfree",
        "pgactivate", "pgdeactivate", "pglazyfree", "pgfault", "pgmajfault", "pglazyfreed", "pgrefill", "pgreuse",
        "pgsteal_kswapd", "pgsteal_direct", "pgsteal_khugepaged", "pgsteal_proactive", "pgscan_kswapd", "pgscan_direct",
        "pgscan_khugepaged", "pgscan_proactive", "pgscan_direct_throttle", "pgscan_anon", "pgscan_file", "pgsteal_anon",
        "pgsteal_file", "zone_reclaim_success", "zone_reclaim_failed", "pginodesteal", "slabs_scanned", "kswapd_inodesteal",
        "kswapd_low_wmark_hit_quickly", "kswapd_high_wmark_hit_quickly", "pageoutrun", "pgrotated", "drop_pagecache", "drop_slab",
        "oom_kill", "numa_pte_updates", "numa_huge_pte_updates", "numa_hint_faults", "numa_hint_faults_local",
        "numa_pages_migrated", "pgmigrate_success", "pgmigrate_fail", "thp_migration_success", "thp_migration_fail",
        "thp_migration_split", "compact_migrate_scanned", "compact_free_scanned", "compact_isolated", "compact_stall",
        "compact_fail", "compact_success", "compact_daemon_wake", "compact_daemon_migrate_scanned", "compact_daemon_free_scanned",
        "htlb_buddy_alloc_success", "htlb_buddy_alloc_fail", "unevictable_pgs_culled", "unevictable_pgs_scanned",
        "unevictable_pgs_rescued", "unevictable_pgs_mlocked", "unevictable_pgs_munlocked", "unevictable_pgs_cleared",
        "unevictable_pgs_stranded", "thp_fault_alloc", "thp_fault_fallback", "thp_fault_fallback_charge", "thp_collapse_alloc",
        "thp_collapse_alloc_failed", "thp_file_alloc", "thp_file_fallback", "thp_file_fallback_charge", "thp_file_mapped",
        "thp_split_page", "thp_split_page_failed", "thp_deferred_split_page", "thp_underused_split_page", "thp_split_pmd",
        "thp_scan_exceed_none_pte", "thp_scan_exceed_swap_pte", "thp_scan_exceed_share_pte", "thp_split_pud",
        "thp_zero_page_alloc", "thp_zero_page_alloc_failed", "thp_swpout", "thp_swpout_fallback", "balloon_inflate",
        "balloon_deflate", "balloon_migrate", "swap_ra", "swap_ra_hit", "swpin_zero", "swpout_zero", "ksm_swpin_copy", "cow_ksm",
        "zswpin", "zswpout", "zswpwb", "direct_map_level2_splits", "direct_map_level3_splits", "direct_map_level2_collapses",
        "direct_map_level3_collapses", "nr_tlb_remote_flush", "nr_tlb_remote_flush_received", "nr_tlb_local_flush_all",
        "nr_tlb_local_flush_one",
    ]

    static let fields: [FieldDecl] =
        gauges.map { name in said(name) ?? FieldDecl(name, .int, unit: "pages", doc: "a level") }
        + counters.map { name in said(name) ?? FieldDecl(name, .int, doc: "a count since boot", counter: true) }

    /// The known declaration of `name`: lengths first, a string compare only when they match.
    private static func said(_ name: String) -> FieldDecl? {
        let length = name.utf8.count
        return known.first { $0.name.utf8.count == length && $0.name == name }
    }

    private let context: MonitorContext
    private let procfs: FSRoot
    private let include: [String]
    /// Each name's verdict, so the globs run once per name.
    private var selected: [String: Bool] = [:]
    private var lastMalformed: [Int] = []

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        if let i = options.include.firstIndex(where: \.isEmpty) { throw .invalidOption("include[\(i)]", "must not be empty") }
        self.context = context
        procfs = try .monitorRoot(options.procfs, option: "procfs")
        include = options.include
    }

    func start() throws(MonitorError) {
        lastMalformed = []
        try procfs.require("vmstat")
    }

    func poll() throws(MonitorError) {
        let stat = try MonitorError.probing { () throws(ProbeError) in try procfs.vmStat() }
        if stat.malformed != lastMalformed {
            lastMalformed = stat.malformed
            if !stat.malformed.isEmpty {
                context.log(.debug, "\(procfs.path("vmstat")): skipped malformed line(s) \(stat.malformed.map(String.init).joined(separator: ", "))")
            }
        }
        var fields: [(String, Value)] = []
        fields.reserveCapacity(stat.entries.count)
        var seen: Set<String> = []
        for (name, value) in stat.entries where isSelected(name) && seen.insert(name).inserted {
            fields.append((name, .int(clamping: value)))
        }
        guard !fields.isEmpty else { return }
        context.emit("sample", fields: fields)
    }

    private func isSelected(_ name: String) -> Bool {
        if let known = selected[name] { return known }
        // A field name must be 1 to 256 bytes of lowercase snake_case as the kernel writes them.
        let valid = name.utf8.count <= 256 && name.utf8.allSatisfy { $0 == UInt8(ascii: "_") || ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x7A) }
        let verdict = valid && include.contains { fnmatch($0, name, 0) == 0 }
        if selected.count < 4096 { selected[name] = verdict }
        return verdict
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(VMStatMonitor.self, a, r) }
