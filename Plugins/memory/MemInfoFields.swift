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
    /// the kernel's order, with what each one is. Counts (no kB) are marked.
    static let known: [(key: String, count: Bool, doc: String)] = [
        ("MemTotal", false, "usable RAM: physical memory less reserved memory and the kernel's code"),
        ("MemFree", false, "RAM left unused"),
        ("MemAvailable", false, "estimate of the memory available for new work without swapping (3.14+)"),
        ("Buffers", false, "block device buffers, kept for the page cache"),
        ("Cached", false, "page cache of files, tmpfs and shmem (without SwapCached)"),
        ("SwapCached", false, "memory swapped out and back in, still in the swap file"),
        ("Active", false, "memory used recently, not reclaimed unless needed"),
        ("Inactive", false, "memory used less recently, reclaimed first"),
        ("Active(anon)", false, "active anonymous and shmem memory"),
        ("Inactive(anon)", false, "inactive anonymous and shmem memory"),
        ("Active(file)", false, "active page cache"),
        ("Inactive(file)", false, "inactive page cache"),
        ("Unevictable", false, "memory that cannot be reclaimed (mlocked, ramfs…)"),
        ("Mlocked", false, "memory locked with mlock()"),
        ("HighTotal", false, "high memory (32-bit kernels with highmem)"),
        ("HighFree", false, "high memory unused (32-bit kernels with highmem)"),
        ("LowTotal", false, "low memory (32-bit kernels with highmem)"),
        ("LowFree", false, "low memory unused (32-bit kernels with highmem)"),
        ("MmapCopy", false, "memory copied for mmap (kernels without an MMU)"),
        ("SwapTotal", false, "swap space"),
        ("SwapFree", false, "swap space unused"),
        ("Zswap", false, "memory the zswap back end uses (5.19+)"),
        ("Zswapped", false, "anonymous memory stored compressed in zswap (5.19+)"),
        ("Dirty", false, "memory waiting to be written back to disk"),
        ("Writeback", false, "memory being written back to disk now"),
        ("AnonPages", false, "anonymous pages mapped into user page tables"),
        ("Mapped", false, "files mapped into memory (libraries, mmap)"),
        ("Shmem", false, "shared memory and tmpfs"),
        ("KReclaimable", false, "kernel memory it can reclaim under pressure (slab and others, 4.20+)"),
        ("Slab", false, "kernel slab caches"),
        ("SReclaimable", false, "slab that can be reclaimed (dentry and inode caches)"),
        ("SUnreclaim", false, "slab that cannot be reclaimed"),
        ("KernelStack", false, "kernel stacks of all tasks"),
        ("ShadowCallStack", false, "shadow call stacks (arm64 with SCS)"),
        ("PageTables", false, "page tables of user processes"),
        ("SecPageTables", false, "secondary page tables (KVM, IOMMU; 6.3+)"),
        ("Quicklists", false, "page table quicklists (older kernels)"),
        ("NFS_Unstable", false, "NFS pages sent but not yet committed (always 0 since 5.8)"),
        ("Bounce", false, "bounce buffers for devices that cannot reach all memory"),
        ("WritebackTmp", false, "temporary writeback buffers of FUSE"),
        ("CommitLimit", false, "the most memory that can be committed under strict overcommit"),
        ("Committed_AS", false, "memory committed to processes (allocated, whether used or not)"),
        ("VmallocTotal", false, "size of the vmalloc address space"),
        ("VmallocUsed", false, "vmalloc memory in use"),
        ("VmallocChunk", false, "largest free vmalloc block (0 since 4.4)"),
        ("Percpu", false, "memory of per-CPU allocations"),
        ("EarlyMemtestBad", false, "RAM the early memory test found bad (6.6+, with memtest)"),
        ("HardwareCorrupted", false, "RAM the kernel found corrupted and took out of use"),
        ("AnonHugePages", false, "anonymous transparent huge pages"),
        ("ShmemHugePages", false, "shmem and tmpfs in transparent huge pages"),
        ("ShmemPmdMapped", false, "shmem mapped into user space with huge pages"),
        ("FileHugePages", false, "page cache in transparent huge pages (5.4+)"),
        ("FilePmdMapped", false, "page cache mapped into user space with huge pages (5.4+)"),
        ("CmaTotal", false, "memory reserved for the contiguous memory allocator"),
        ("CmaFree", false, "CMA memory unused"),
        ("Unaccepted", false, "memory not yet accepted by a confidential guest (6.5+)"),
        ("Balloon", false, "memory taken by a balloon driver (6.12+)"),
        ("HugePages_Total", true, "huge pages in the pool"),
        ("HugePages_Free", true, "huge pages in the pool not yet allocated"),
        ("HugePages_Rsvd", true, "huge pages reserved but not yet allocated"),
        ("HugePages_Surp", true, "huge pages above the pool's size (overcommitted)"),
        ("Hugepagesize", false, "the default huge page size"),
        ("Hugetlb", false, "memory of huge pages of all sizes"),
        ("DirectMap4k", false, "kernel direct map in 4 KiB pages (x86)"),
        ("DirectMap4M", false, "kernel direct map in 4 MiB pages (32-bit x86 without PAE)"),
        ("DirectMap2M", false, "kernel direct map in 2 MiB pages (x86)"),
        ("DirectMap1G", false, "kernel direct map in 1 GiB pages (x86)"),
    ]

    static let declared: [FieldDecl] = known.map { entry in
        FieldDecl(fieldName(for: entry.key)!, .int, unit: entry.count ? "" : "bytes",
                  doc: "\(entry.key): \(entry.doc)\(entry.count ? " (a count)" : " (kB in the file)")")
    }

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

    /// The field name of each known key, computed once.
    private static let names: [String: String] = Dictionary(
        known.map { ($0.key, fieldName(for: $0.key)!) }, uniquingKeysWith: { a, _ in a })
}
