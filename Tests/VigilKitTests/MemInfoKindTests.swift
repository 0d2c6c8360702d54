import Testing
import VigilCore
import VigilKitTesting

/// The memory plugin's `meminfo` kind: every line of /proc/meminfo as a
/// field, on the real capture of a machine and on an old 32-bit kernel
/// (no MemAvailable, HighTotal and DirectMap4M, and two keys no kernel
/// writes yet: left out).
@Suite struct MemInfoKindTests {
    @Test(arguments: ["capture", "old-kernel"])
    func everyLineIsAField(_ machine: String) throws {
        try PluginGolden(plugin: "memory", name: machine)
            .check(options: "{ procfs: \(machines)/\(machine)/proc, meminfo: true }", polls: 1)
    }

    @Test func anUnknownKeyIsLoggedOnce() throws {
        let host = try PluginTestHost(path: productsDir + "/libmemory.so")
        let instance = try host.instance(options: "{ procfs: \(machines)/old-kernel/proc, meminfo: true }", interval: .seconds(1))
        try instance.start()
        try instance.advance(by: .seconds(1))
        try instance.stop()
        let lines = instance.logs.map(\.message).filter { $0.contains("is not a key this plugin knows") }
        #expect(lines.count == 2 && lines[0].contains("'FutureCache'") && lines[1].contains("'FutureCount'"), "\(lines)")
        #expect(instance.events(kind: "meminfo").allSatisfy { $0.int("future_cache") == nil && $0.int("high_total") != nil })
        #expect(instance.violations.isEmpty)
    }

    @Test func offByDefault() throws {
        let host = try PluginTestHost(path: productsDir + "/libmemory.so")
        let instance = try host.instance(options: "{ procfs: \(machines)/capture/proc }", interval: .seconds(1))
        try instance.start()
        try instance.stop()
        #expect(instance.events(kind: "meminfo").isEmpty)
    }

    /// The names node_exporter's 54 families on the captured machine come
    /// from, by the documented rule, all declared with their units.
    @Test func theCapturedKeysAreDeclared() throws {
        let d = try PluginTestHost(path: productsDir + "/libmemory.so").description
        let meminfo = try #require(d.events.first { $0.kind == "meminfo" })
        #expect(!meminfo.dynamicFields)
        let expected = [
            "mem_total", "mem_free", "mem_available", "buffers", "cached", "swap_cached", "active", "inactive",
            "active_anon", "inactive_anon", "active_file", "inactive_file", "unevictable", "mlocked", "swap_total",
            "swap_free", "zswap", "zswapped", "dirty", "writeback", "anon_pages", "mapped", "shmem", "k_reclaimable",
            "slab", "s_reclaimable", "s_unreclaim", "kernel_stack", "page_tables", "sec_page_tables", "nfs_unstable",
            "bounce", "writeback_tmp", "commit_limit", "committed_as", "vmalloc_total", "vmalloc_used",
            "vmalloc_chunk", "percpu", "anon_huge_pages", "shmem_huge_pages", "shmem_pmd_mapped", "file_huge_pages",
            "file_pmd_mapped", "balloon", "huge_pages_total", "huge_pages_free", "huge_pages_rsvd", "huge_pages_surp",
            "hugepagesize", "hugetlb", "direct_map_4k", "direct_map_2m", "direct_map_1g",
        ]
        #expect(expected.count == 54)
        let declared = Dictionary(uniqueKeysWithValues: meminfo.fields.map { ($0.name, $0) })
        for name in expected {
            let field = try #require(declared[name], "\(name) is not declared")
            #expect(field.unit == (name.hasPrefix("huge_pages_") ? "" : "bytes"), "\(name)")
            #expect(!field.doc.isEmpty && field.type == .int && !field.counter, "\(name)")
        }
    }
}
