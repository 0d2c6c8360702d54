import LinuxProbes
import VigilKit

/// The `meminfo` kind: every line of /proc/meminfo as a field.
///
/// The field's name is the kernel's key in lowercase snake_case, by one rule
/// (`fieldName(for:)`): a word starts at an upper-case letter after a
/// lower-case letter, at the last upper-case letter of a run
/// followed by a lower-case one, and at the first digit after a letter;
/// `(`, `)`, `_` and anything else that is not a letter or digit separate
/// words. So MemTotal → mem_total, Active(anon) → active_anon, SUnreclaim →
/// s_unreclaim, NFS_Unstable → nfs_unstable, Committed_AS → committed_as,
/// HugePages_Total → huge_pages_total, DirectMap2M → direct_map_2m.
///
/// Values in kB (KiB) are converted to bytes; the others (HugePages_*) are
/// counts as written. Every key the kernel is known to write is declared
/// below, with its unit. A key only a newer kernel writes is left out (the
/// monitor logs it once per start): declared fields keep a manifest's rules
/// checkable (a kind with dynamic fields would turn every misspelt memory
/// field into a warning), and a new key joins this table with its unit.
enum MemInfoFields {
    /// The keys of fs/proc/meminfo.c (and arch/*/mm's DirectMap lines), in
    /// the kernel's order, each with its field: the name by
    /// `fieldName(for:)`'s rule, the doc with what the file holds (kB, or a
    /// count). Written out rather than computed at load: building the names
    /// and docs was two thirds of the plugin's entry point (300,000
    /// instructions of 480,000). A debug build checks each name against the
    /// rule at the first poll.
    struct Known {
        let key: String
        let field: FieldDecl
        init(_ key: String, _ field: FieldDecl) { self.key = key; self.field = field }
    }

    static let known: [Known] = [
        Known("MemTotal", FieldDecl("mem_total", .int, unit: "bytes", doc: "MemTotal: usable RAM: physical memory less reserved memory and the kernel's code (kB in the file)")),
        Known("MemFree", FieldDecl("mem_free", .int, unit: "bytes", doc: "MemFree: RAM left unused (kB in the file)")),
        Known("MemAvailable", FieldDecl("mem_available", .int, unit: "bytes", doc: "MemAvailable: estimate of the memory available for new work without swapping (3.14+) (kB in the file)")),
        Known("Buffers", FieldDecl("buffers", .int, unit: "bytes", doc: "Buffers: block device buffers, kept for the page cache (kB in the file)")),
        Known("Cached", FieldDecl("cached", .int, unit: "bytes", doc: "Cached: page cache of files, tmpfs and shmem (without SwapCached) (kB in the file)")),
        Known("SwapCached", FieldDecl("swap_cached", .int, unit: "bytes", doc: "SwapCached: memory swapped out and back in, still in the swap file (kB in the file)")),
        Known("Active", FieldDecl("active", .int, unit: "bytes", doc: "Active: memory used recently, not reclaimed unless needed (kB in the file)")),
        Known("Inactive", FieldDecl("inactive", .int, unit: "bytes", doc: "Inactive: memory used less recently, reclaimed first (kB in the file)")),
        Known("Active(anon)", FieldDecl("active_anon", .int, unit: "bytes", doc: "Active(anon): active anonymous and shmem memory (kB in the file)")),
        Known("Inactive(anon)", FieldDecl("inactive_anon", .int, unit: "bytes", doc: "Inactive(anon): inactive anonymous and shmem memory (kB in the file)")),
        Known("Active(file)", FieldDecl("active_file", .int, unit: "bytes", doc: "Active(file): active page cache (kB in the file)")),
        Known("Inactive(file)", FieldDecl("inactive_file", .int, unit: "bytes", doc: "Inactive(file): inactive page cache (kB in the file)")),
        Known("Unevictable", FieldDecl("unevictable", .int, unit: "bytes", doc: "Unevictable: memory that cannot be reclaimed (mlocked, ramfs…) (kB in the file)")),
        Known("Mlocked", FieldDecl("mlocked", .int, unit: "bytes", doc: "Mlocked: memory locked with mlock() (kB in the file)")),
        Known("HighTotal", FieldDecl("high_total", .int, unit: "bytes", doc: "HighTotal: high memory (32-bit kernels with highmem) (kB in the file)")),
        Known("HighFree", FieldDecl("high_free", .int, unit: "bytes", doc: "HighFree: high memory unused (32-bit kernels with highmem) (kB in the file)")),
        Known("LowTotal", FieldDecl("low_total", .int, unit: "bytes", doc: "LowTotal: low memory (32-bit kernels with highmem) (kB in the file)")),
        Known("LowFree", FieldDecl("low_free", .int, unit: "bytes", doc: "LowFree: low memory unused (32-bit kernels with highmem) (kB in the file)")),
        Known("MmapCopy", FieldDecl("mmap_copy", .int, unit: "bytes", doc: "MmapCopy: memory copied for mmap (kernels without an MMU) (kB in the file)")),
        Known("SwapTotal", FieldDecl("swap_total", .int, unit: "bytes", doc: "SwapTotal: swap space (kB in the file)")),
        Known("SwapFree", FieldDecl("swap_free", .int, unit: "bytes", doc: "SwapFree: swap space unused (kB in the file)")),
        Known("Zswap", FieldDecl("zswap", .int, unit: "bytes", doc: "Zswap: memory the zswap back end uses (5.19+) (kB in the file)")),
        Known("Zswapped", FieldDecl("zswapped", .int, unit: "bytes", doc: "Zswapped: anonymous memory stored compressed in zswap (5.19+) (kB in the file)")),
        Known("Dirty", FieldDecl("dirty", .int, unit: "bytes", doc: "Dirty: memory waiting to be written back to disk (kB in the file)")),
        Known("Writeback", FieldDecl("writeback", .int, unit: "bytes", doc: "Writeback: memory being written back to disk now (kB in the file)")),
        Known("AnonPages", FieldDecl("anon_pages", .int, unit: "bytes", doc: "AnonPages: anonymous pages mapped into user page tables (kB in the file)")),
        Known("Mapped", FieldDecl("mapped", .int, unit: "bytes", doc: "Mapped: files mapped into memory (libraries, mmap) (kB in the file)")),
        Known("Shmem", FieldDecl("shmem", .int, unit: "bytes", doc: "Shmem: shared memory and tmpfs (kB in the file)")),
        Known("KReclaimable", FieldDecl("k_reclaimable", .int, unit: "bytes", doc: "KReclaimable: kernel memory it can reclaim under pressure (slab and others, 4.20+) (kB in the file)")),
        Known("Slab", FieldDecl("slab", .int, unit: "bytes", doc: "Slab: kernel slab caches (kB in the file)")),
        Known("SReclaimable", FieldDecl("s_reclaimable", .int, unit: "bytes", doc: "SReclaimable: slab that can be reclaimed (dentry and inode caches) (kB in the file)")),
        Known("SUnreclaim", FieldDecl("s_unreclaim", .int, unit: "bytes", doc: "SUnreclaim: slab that cannot be reclaimed (kB in the file)")),
        Known("KernelStack", FieldDecl("kernel_stack", .int, unit: "bytes", doc: "KernelStack: kernel stacks of all tasks (kB in the file)")),
        Known("ShadowCallStack", FieldDecl("shadow_call_stack", .int, unit: "bytes", doc: "ShadowCallStack: shadow call stacks (arm64 with SCS) (kB in the file)")),
        Known("PageTables", FieldDecl("page_tables", .int, unit: "bytes", doc: "PageTables: page tables of user processes (kB in the file)")),
        Known("SecPageTables", FieldDecl("sec_page_tables", .int, unit: "bytes", doc: "SecPageTables: secondary page tables (KVM, IOMMU; 6.3+) (kB in the file)")),
        Known("Quicklists", FieldDecl("quicklists", .int, unit: "bytes", doc: "Quicklists: page table quicklists (older kernels) (kB in the file)")),
        Known("NFS_Unstable", FieldDecl("nfs_unstable", .int, unit: "bytes", doc: "NFS_Unstable: NFS pages sent but not yet committed (always 0 since 5.8) (kB in the file)")),
        Known("Bounce", FieldDecl("bounce", .int, unit: "bytes", doc: "Bounce: bounce buffers for devices that cannot reach all memory (kB in the file)")),
        Known("WritebackTmp", FieldDecl("writeback_tmp", .int, unit: "bytes", doc: "WritebackTmp: temporary writeback buffers of FUSE (kB in the file)")),
        Known("CommitLimit", FieldDecl("commit_limit", .int, unit: "bytes", doc: "CommitLimit: the most memory that can be committed under strict overcommit (kB in the file)")),
        Known("Committed_AS", FieldDecl("committed_as", .int, unit: "bytes", doc: "Committed_AS: memory committed to processes (allocated, whether used or not) (kB in the file)")),
        Known("VmallocTotal", FieldDecl("vmalloc_total", .int, unit: "bytes", doc: "VmallocTotal: size of the vmalloc address space (kB in the file)")),
        Known("VmallocUsed", FieldDecl("vmalloc_used", .int, unit: "bytes", doc: "VmallocUsed: vmalloc memory in use (kB in the file)")),
        Known("VmallocChunk", FieldDecl("vmalloc_chunk", .int, unit: "bytes", doc: "VmallocChunk: largest free vmalloc block (0 since 4.4) (kB in the file)")),
        Known("Percpu", FieldDecl("percpu", .int, unit: "bytes", doc: "Percpu: memory of per-CPU allocations (kB in the file)")),
        Known("EarlyMemtestBad", FieldDecl("early_memtest_bad", .int, unit: "bytes", doc: "EarlyMemtestBad: RAM the early memory test found bad (6.6+, with memtest) (kB in the file)")),
        Known("HardwareCorrupted", FieldDecl("hardware_corrupted", .int, unit: "bytes", doc: "HardwareCorrupted: RAM the kernel found corrupted and took out of use (kB in the file)")),
        Known("AnonHugePages", FieldDecl("anon_huge_pages", .int, unit: "bytes", doc: "AnonHugePages: anonymous transparent huge pages (kB in the file)")),
        Known("ShmemHugePages", FieldDecl("shmem_huge_pages", .int, unit: "bytes", doc: "ShmemHugePages: shmem and tmpfs in transparent huge pages (kB in the file)")),
        Known("ShmemPmdMapped", FieldDecl("shmem_pmd_mapped", .int, unit: "bytes", doc: "ShmemPmdMapped: shmem mapped into user space with huge pages (kB in the file)")),
        Known("FileHugePages", FieldDecl("file_huge_pages", .int, unit: "bytes", doc: "FileHugePages: page cache in transparent huge pages (5.4+) (kB in the file)")),
        Known("FilePmdMapped", FieldDecl("file_pmd_mapped", .int, unit: "bytes", doc: "FilePmdMapped: page cache mapped into user space with huge pages (5.4+) (kB in the file)")),
        Known("CmaTotal", FieldDecl("cma_total", .int, unit: "bytes", doc: "CmaTotal: memory reserved for the contiguous memory allocator (kB in the file)")),
        Known("CmaFree", FieldDecl("cma_free", .int, unit: "bytes", doc: "CmaFree: CMA memory unused (kB in the file)")),
        Known("Unaccepted", FieldDecl("unaccepted", .int, unit: "bytes", doc: "Unaccepted: memory not yet accepted by a confidential guest (6.5+) (kB in the file)")),
        Known("Balloon", FieldDecl("balloon", .int, unit: "bytes", doc: "Balloon: memory taken by a balloon driver (6.12+) (kB in the file)")),
        Known("HugePages_Total", FieldDecl("huge_pages_total", .int, doc: "HugePages_Total: huge pages in the pool (a count)")),
        Known("HugePages_Free", FieldDecl("huge_pages_free", .int, doc: "HugePages_Free: huge pages in the pool not yet allocated (a count)")),
        Known("HugePages_Rsvd", FieldDecl("huge_pages_rsvd", .int, doc: "HugePages_Rsvd: huge pages reserved but not yet allocated (a count)")),
        Known("HugePages_Surp", FieldDecl("huge_pages_surp", .int, doc: "HugePages_Surp: huge pages above the pool's size (overcommitted) (a count)")),
        Known("Hugepagesize", FieldDecl("hugepagesize", .int, unit: "bytes", doc: "Hugepagesize: the default huge page size (kB in the file)")),
        Known("Hugetlb", FieldDecl("hugetlb", .int, unit: "bytes", doc: "Hugetlb: memory of huge pages of all sizes (kB in the file)")),
        Known("DirectMap4k", FieldDecl("direct_map_4k", .int, unit: "bytes", doc: "DirectMap4k: kernel direct map in 4 KiB pages (x86) (kB in the file)")),
        Known("DirectMap4M", FieldDecl("direct_map_4m", .int, unit: "bytes", doc: "DirectMap4M: kernel direct map in 4 MiB pages (32-bit x86 without PAE) (kB in the file)")),
        Known("DirectMap2M", FieldDecl("direct_map_2m", .int, unit: "bytes", doc: "DirectMap2M: kernel direct map in 2 MiB pages (x86) (kB in the file)")),
        Known("DirectMap1G", FieldDecl("direct_map_1g", .int, unit: "bytes", doc: "DirectMap1G: kernel direct map in 1 GiB pages (x86) (kB in the file)")),
    ]

    static let declared: [FieldDecl] = known.map(\.field)

    /// The field name of a meminfo key, by the rule above; nil when the key
    /// has no letter to start a name with, or the name would be too long.
    static func fieldName(for key: String) -> String? {
        var out: [UInt8] = []
        let bytes = Array(key.utf8)
        func isUpper(_ c: UInt8) -> Bool { c >= 0x41 && c <= 0x5A }
        func isLower(_ c: UInt8) -> Bool { c >= 0x61 && c <= 0x7A }
        func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }
        func separate() { if let last = out.last, last != 0x5F { out.append(0x5F) } }
        for (i, c) in bytes.enumerated() {
            let previous = i > 0 ? bytes[i - 1] : 0
            let next = i + 1 < bytes.count ? bytes[i + 1] : 0
            if isUpper(c) {
                if isLower(previous) || (isUpper(previous) && isLower(next)) { separate() }
                out.append(c + 0x20)
            } else if isLower(c) {
                out.append(c)
            } else if isDigit(c) {
                if isUpper(previous) || isLower(previous) { separate() }
                out.append(c)
            } else {
                separate()
            }
        }
        while out.last == 0x5F { out.removeLast() }
        guard let first = out.first, isLower(first), out.count <= 128 else { return nil }
        return String(decoding: out, as: UTF8.self)
    }

    /// The fields of one /proc/meminfo, in the file's order; a key given
    /// twice keeps its first value. `unknown` is called with each key that
    /// is not declared.
    static func fields(_ info: MemInfo, unknown: (String) -> Void) -> [(String, Value)] {
        var fields: [(String, Value)] = []
        fields.reserveCapacity(info.lines.count)
        var seen = Set<String>()
        for line in info.lines {
            guard let name = names[line.key] else { unknown(line.key); continue }
            if seen.insert(name).inserted { fields.append((name, .int(clamping: line.value))) }
        }
        return fields
    }

    /// The field name of each known key, made at the first poll.
    private static let names: [String: String] = {
        #if DEBUG
        for k in known { precondition(fieldName(for: k.key) == k.field.name, "meminfo: \(k.key) is declared \(k.field.name), not by the rule") }
        #endif
        return Dictionary(known.map { ($0.key, $0.field.name) }, uniquingKeysWith: { a, _ in a })
    }()
}
