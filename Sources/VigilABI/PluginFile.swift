import Glibc
import VigilChildProcess
import VigilCore

// What the host checks of a plugin file before it lets dlopen run any of it,
// and of the entry symbol right after. Self-contained (Glibc and VigilCore
// only), so that it can move into the ABI target with the loader.

/// How plugin files are vetted before dlopen.
package struct PluginFilePolicy: Sendable {
    /// Skip the ownership and permission rules (never the ELF ones): set by
    /// `--allow-unsafe-plugins` or the manifest's `allow_unsafe_plugins: true`.
    /// Each rule skipped is reported as a warning naming the file.
    package var allowUnsafe: Bool
    /// Who may own a plugin file and every directory above it: root and the
    /// user this host runs as (osquery's rule for its extensions).
    package var trustedOwners: [uid_t]

    package init(allowUnsafe: Bool = false) {
        self.allowUnsafe = allowUnsafe
        self.trustedOwners = FileTrust.defaultOwners()
    }

    /// How the refusal tells an operator to lift a rule.
    static let override = "--allow-unsafe-plugins"
}

/// What a catalog does with a plugin file before it loads it in-process: the
/// checks of `PluginFile.open` under `policy`, the warnings of the rules the
/// policy skips, and, where set, a trial load elsewhere (`probe`: in a child
/// process) whose refusal stands for the file's.
package struct PluginVetting: Sendable {
    package var policy: PluginFilePolicy
    /// Where the warnings of skipped rules go.
    package var warn: @Sendable (String) -> Void
    /// Called with each file that passed the checks, before this process
    /// loads it; returns why the file is refused, or nil to go on.
    package var probe: (@Sendable (PluginFile) -> PluginFileRefusal?)?

    package init(policy: PluginFilePolicy = PluginFilePolicy(),
                 warn: @escaping @Sendable (String) -> Void = PluginVetting.warnOnStandardError,
                 probe: (@Sendable (PluginFile) -> PluginFileRefusal?)? = nil) {
        self.policy = policy
        self.warn = warn
        self.probe = probe
    }

    package static let warnOnStandardError: @Sendable (String) -> Void = { line in
        let text = "vigil: warning: \(line)\n"
        _ = text.withCString { write(2, $0, strlen($0)) }
    }

    /// The file, checked and, where a probe is set, probed.
    package func open(_ path: String) -> Result<PluginFile, PluginFileRefusal> {
        let result = PluginFile.open(path, policy: policy)
        guard case .success(let file) = result else { return result }
        for line in file.warnings { warn(line) }
        if let probe, let refusal = probe(file) { return .failure(refusal) }
        return result
    }
}

/// Why a plugin file was refused before dlopen.
package struct PluginFileRefusal: Error, Sendable, CustomStringConvertible {
    package enum Rule: String, Sendable {
        /// Not there, not resolvable, not readable.
        case unreadable
        /// A directory, FIFO, device… after resolving symlinks.
        case notRegular
        /// The file, its directory or a directory above it can be written by
        /// group or others.
        case writable
        /// The file or a directory above it belongs to another user.
        case owner
        /// Not an ELF shared object for this machine, or truncated or corrupt.
        case elf
        /// Loading it in a child process failed: it crashed, hung or was refused there.
        case probe

        /// Whether the unsafe-plugins override lifts it.
        package var overridable: Bool { self == .writable || self == .owner }
    }

    package var path: String
    package var rule: Rule
    package var reason: String
    package var description: String { "plugin \(path) refused: \(reason)" }

    package init(path: String, rule: Rule, reason: String) {
        self.path = path
        self.rule = rule
        self.reason = reason
    }
}

/// A plugin file that passed the checks, held open: the descriptor the checks
/// read is the one dlopen loads (`loadPath`). Closed when released; dlopen
/// keeps its own mapping.
package final class PluginFile {
    /// The path as given.
    package let path: String
    /// The path with every symlink resolved: what the rules were applied to.
    package let realPath: String
    package let fd: Int32
    package let size: UInt64
    package let device: UInt64
    package let inode: UInt64
    /// One line per rule the override skipped: "plugin P: RULE; loaded anyway (…)".
    package let warnings: [String]

    /// What to hand dlopen: the real path, which has no symlink left in it
    /// and whose every directory the rules checked.
    ///
    /// dlopen takes a path, not a descriptor, so between the checks (made on
    /// the open descriptor) and the load the path could be made to name
    /// another file. `/proc/self/fd/N` would close that window, but glibc
    /// knows a loaded object by the name it was opened with: once descriptor
    /// N is closed and its number reused for the next plugin, dlopen of the
    /// same name hands back the first plugin (seen here), and `$ORIGIN` in a
    /// plugin's RUNPATH would mean /proc/self/fd. So the real path is loaded,
    /// with the checked descriptor held open across dlopen, and
    /// `changedSinceChecked` asked after it: swapping a file on a path whose
    /// directories only root and this user can write takes root or this
    /// user, which the rules trust anyway (with the override, the window is
    /// the operator's choice).
    package var loadPath: String { realPath }

    /// Why the file at the real path is no longer the one that was checked,
    /// or nil when it still is (same device and inode as the descriptor).
    package func changedSinceChecked() -> String? {
        var st = stat()
        guard stat(realPath, &st) == 0 else { return "\(realPath) disappeared while it was being loaded" }
        return UInt64(st.st_dev) == device && UInt64(st.st_ino) == inode ? nil
            : "\(realPath) was replaced while it was being loaded"
    }

    private init(path: String, realPath: String, fd: Int32, stat st: stat, warnings: [String]) {
        self.path = path
        self.realPath = realPath
        self.fd = fd
        self.size = UInt64(max(0, st.st_size))
        self.device = UInt64(st.st_dev)
        self.inode = UInt64(st.st_ino)
        self.warnings = warnings
    }

    deinit { close(fd) }

    /// Resolves, opens and checks the plugin file at `path`: a regular file,
    /// safe to load (owner and permissions, unless the policy allows unsafe
    /// plugins) and an ELF shared object for this machine whose segments are
    /// all inside the file. Runs none of the file's code.
    package static func open(_ path: String, policy: PluginFilePolicy) -> Result<PluginFile, PluginFileRefusal> {
        func refuse(_ rule: PluginFileRefusal.Rule, _ reason: String) -> Result<PluginFile, PluginFileRefusal> {
            .failure(PluginFileRefusal(path: path, rule: rule, reason: reason))
        }
        guard let real = realPath(of: path) else {
            return refuse(.unreadable, "cannot read the file: \(errorText())")
        }
        var named = stat()
        guard lstat(real, &named) == 0 else { return refuse(.unreadable, "cannot read \(real): \(errorText())") }
        guard named.st_mode & S_IFMT == S_IFREG else {
            return refuse(.notRegular, "not a regular file (\(real) is \(kindName(named.st_mode)))")
        }
        // O_NOFOLLOW: the real path has no symlinks left, so one appearing now
        // is a swap. O_NONBLOCK: a FIFO swapped in cannot block the open.
        let fd = Glibc.open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { return refuse(.unreadable, "cannot open \(real): \(errorText())") }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let why = errorText()
            close(fd)
            return refuse(.unreadable, "cannot read \(real): \(why)")
        }
        guard st.st_mode & S_IFMT == S_IFREG, st.st_dev == named.st_dev, st.st_ino == named.st_ino else {
            close(fd)
            return refuse(.notRegular, "\(real) changed while it was being checked")
        }

        var warnings: [String] = []
        // Owner and permissions: of the open file, then of each directory up to /.
        for problem in safetyProblems(real: real, file: st, policy: policy) {
            guard policy.allowUnsafe else {
                close(fd)
                return refuse(problem.rule, "\(problem.text); \(problem.fix), or allow with \(PluginFilePolicy.override)")
            }
            warnings.append("plugin \(path): \(problem.text); loaded anyway (unsafe plugins allowed)")
        }
        if let problem = ELFCheck.problem(fd: fd, size: UInt64(max(0, st.st_size))) {
            close(fd)
            return refuse(.elf, "not a loadable shared object: \(problem)")
        }
        return .success(PluginFile(path: path, realPath: real, fd: fd, stat: st, warnings: warnings))
    }

    struct SafetyProblem {
        var rule: PluginFileRefusal.Rule
        var text: String
        var fix: String
    }

    /// The owner and permission rules of `FileTrust`, which a program a
    /// plugin runs is held to as well.
    static func safetyProblems(real: String, file: stat, policy: PluginFilePolicy) -> [SafetyProblem] {
        FileTrust.problems(real: real, file: file, owners: policy.trustedOwners, noun: "plugin").map { problem in
            SafetyProblem(rule: problem.rule == .writable ? .writable : .owner, text: problem.text, fix: problem.fix)
        }
    }

    /// Checks that the entry symbol dlsym found is a function (STT_FUNC or
    /// STT_GNU_IFUNC): a plugin that exports `vigil_plugin_entry` as data
    /// would otherwise be called into data. Returns the problem, or nil.
    package static func entrySymbolProblem(_ symbol: UnsafeMutableRawPointer, name: String) -> String? {
        guard let dladdr1 = EntrySymbol.dladdr1 else { return nil }  // a libc without it: nothing to check with
        var info = (UnsafeRawPointer?.none, UnsafeRawPointer?.none, UnsafeRawPointer?.none, UnsafeRawPointer?.none)
        var extra: UnsafeMutableRawPointer?
        let found = withUnsafeMutableBytes(of: &info) { dladdr1(symbol, $0.baseAddress, &extra, EntrySymbol.RTLD_DL_SYMENT) }
        guard found != 0, let extra else {
            return "the address of '\(name)' is in no loaded object's symbol table"
        }
        let type = Int32(extra.assumingMemoryBound(to: Elf64_Sym.self).pointee.st_info & 0xF)
        switch type {
        case STT_FUNC, STT_GNU_IFUNC: return nil
        case STT_OBJECT, STT_COMMON, STT_TLS: return "it exports \(name) as data, not a function"
        default: return "it exports \(name) as an ELF symbol of type \(type), not a function"
        }
    }

    private enum EntrySymbol {
        typealias Fn = @convention(c) (UnsafeRawPointer?, UnsafeMutableRawPointer?,
                                       UnsafeMutablePointer<UnsafeMutableRawPointer?>?, Int32) -> Int32
        /// Looked up at run time: Glibc's Swift module hides it (_GNU_SOURCE).
        static let dladdr1: Fn? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "dladdr1")
            .map { unsafeBitCast($0, to: Fn.self) }
        /// <dlfcn.h>: ask dladdr1 for the ElfW(Sym) entry.
        static let RTLD_DL_SYMENT: Int32 = 1
    }

    package static func realPath(of path: String) -> String? { FileTrust.realPath(of: path) }
    package static func parent(of path: String) -> String { FileTrust.parent(of: path) }

    static func kindName(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFDIR: "a directory"
        case S_IFIFO: "a FIFO"
        case S_IFSOCK: "a socket"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        default: "not a regular file"
        }
    }

    static func errorText() -> String { String(cString: strerror(errno)) }
}

/// The ELF checks: enough of the headers that dlopen can map the file without
/// reading past its end (a truncated file would otherwise die in dlopen with
/// SIGBUS). Reads with pread on the one descriptor, in bounded amounts; every
/// sum and product of header numbers is overflow-checked.
enum ELFCheck {
    /// This host's ELF class, data encoding and machine: a plugin must match.
    static let hostClass = UInt8(MemoryLayout<Int>.size == 8 ? ELFCLASS64 : ELFCLASS32)
    static let hostData = UInt8(1.littleEndian == 1 ? ELFDATA2LSB : ELFDATA2MSB)
    static let hostMachine: UInt16 = {
        #if arch(x86_64)
        return UInt16(EM_X86_64)
        #elseif arch(arm64)
        return UInt16(EM_AARCH64)
        #else
        // Elsewhere: whatever the running executable was built for.
        var header = [UInt8](repeating: 0, count: 20)
        let fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC)
        defer { if fd >= 0 { close(fd) } }
        guard fd >= 0, pread(fd, &header, 20, 0) == 20 else { return 0 }
        return header.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 18, as: UInt16.self) }
        #endif
    }()

    /// Only what a sane shared object has; more is refused rather than read.
    static let maxProgramHeaders = 1024

    static func machineName(_ machine: UInt16) -> String {
        switch Int32(machine) {
        case EM_X86_64: "x86-64"
        case EM_AARCH64: "AArch64"
        case EM_386: "i386"
        case EM_ARM: "ARM"
        case EM_RISCV: "RISC-V"
        case EM_PPC64: "PowerPC64"
        case EM_S390: "S/390"
        default: "machine \(machine)"
        }
    }

    static func className(_ c: UInt8) -> String {
        switch Int32(c) {
        case ELFCLASS32: "32-bit"
        case ELFCLASS64: "64-bit"
        default: "ELF class \(c)"
        }
    }

    /// Reads exactly `count` bytes at `offset`, or nil.
    static func read(_ fd: Int32, offset: UInt64, count: Int) -> [UInt8]? {
        guard count >= 0, offset <= UInt64(Int64.max) else { return nil }
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = bytes.withUnsafeMutableBytes { buffer in
                pread(fd, buffer.baseAddress! + done, count - done, off_t(Int64(offset) + Int64(done)))
            }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return nil }
            done += n
        }
        return bytes
    }

    /// `offset + count * size`, or nil on overflow.
    static func end(_ offset: UInt64, _ count: UInt64, _ size: UInt64) -> UInt64? {
        let (bytes, o1) = count.multipliedReportingOverflow(by: size)
        let (sum, o2) = offset.addingReportingOverflow(bytes)
        return o1 || o2 ? nil : sum
    }

    /// The first problem found, or nil when dlopen may map the file.
    static func problem(fd: Int32, size: UInt64) -> String? {
        let identSize = 16
        guard size >= UInt64(identSize), let ident = read(fd, offset: 0, count: identSize) else {
            return "not an ELF file (\(size) bytes, too short for an ELF header)"
        }
        guard ident[0] == 0x7F, ident[1] == UInt8(ascii: "E"), ident[2] == UInt8(ascii: "L"), ident[3] == UInt8(ascii: "F") else {
            return "not an ELF file (no ELF magic number at its start)"
        }
        guard ident[4] == hostClass else {
            return "it is a \(className(ident[4])) ELF file; this host loads \(className(hostClass)) plugins"
        }
        guard ident[5] == hostData else {
            return "its ELF data encoding is \(ident[5] == UInt8(ELFDATA2MSB) ? "big-endian" : ident[5] == UInt8(ELFDATA2LSB) ? "little-endian" : "unknown (\(ident[5]))"), not this host's"
        }
        guard ident[6] == UInt8(EV_CURRENT) else { return "unknown ELF version \(ident[6])" }
        // 32-bit hosts are not built; the layout below is ELF64.
        guard hostClass == UInt8(ELFCLASS64) else { return nil }

        let ehdrSize = MemoryLayout<Elf64_Ehdr>.size
        guard size >= UInt64(ehdrSize), let raw = read(fd, offset: 0, count: ehdrSize) else {
            return "truncated: \(size) bytes, less than an ELF header"
        }
        let h: Elf64_Ehdr = raw.withUnsafeBytes { $0.loadUnaligned(as: Elf64_Ehdr.self) }
        guard h.e_type == UInt16(ET_DYN) else {
            let kind = switch Int32(h.e_type) {
            case ET_EXEC: "an executable"
            case ET_REL: "an object file (.o), not linked"
            case ET_CORE: "a core dump"
            default: "ELF type \(h.e_type)"
            }
            return "not a shared object: it is \(kind); build it with -shared"
        }
        guard h.e_machine == hostMachine else {
            return "it is built for \(machineName(h.e_machine)); this host is \(machineName(hostMachine))"
        }
        guard h.e_ehsize >= UInt16(ehdrSize) else { return "corrupt ELF header (e_ehsize \(h.e_ehsize))" }

        // Program headers: what dlopen maps.
        let phSize = MemoryLayout<Elf64_Phdr>.size
        guard h.e_phnum > 0 else { return "corrupt: no program headers, nothing to load" }
        guard h.e_phnum != 0xFFFF, Int(h.e_phnum) <= maxProgramHeaders else {
            return "corrupt: \(h.e_phnum) program headers (\(maxProgramHeaders) at most)"
        }
        guard h.e_phentsize == UInt16(phSize) else {
            return "corrupt: program header size \(h.e_phentsize), not \(phSize)"
        }
        guard let phEnd = end(h.e_phoff, UInt64(h.e_phnum), UInt64(phSize)), phEnd <= size else {
            return "truncated or corrupt: its program headers end past the end of the file (\(size) bytes)"
        }
        guard let table = read(fd, offset: h.e_phoff, count: Int(h.e_phnum) * phSize) else {
            return "cannot read its program headers: \(PluginFile.errorText())"
        }
        var loads = 0
        for i in 0..<Int(h.e_phnum) {
            let p: Elf64_Phdr = table.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: i * phSize, as: Elf64_Phdr.self) }
            if p.p_type == UInt32(PT_NULL) || p.p_filesz == 0 { continue }
            guard let segmentEnd = end(p.p_offset, 1, p.p_filesz), segmentEnd <= size else {
                let what = p.p_type == UInt32(PT_LOAD) ? "loadable segment" : "segment"
                return "truncated or corrupt: \(what) #\(i + 1) ends at byte \(p.p_offset &+ p.p_filesz), past the end of the file (\(size) bytes)"
            }
            if p.p_type == UInt32(PT_LOAD) {
                loads += 1
                guard p.p_filesz <= p.p_memsz else {
                    return "corrupt: loadable segment #\(i + 1) has more bytes in the file (\(p.p_filesz)) than in memory (\(p.p_memsz))"
                }
            }
        }
        guard loads > 0 else { return "corrupt: no loadable segment" }
        // Section headers: not needed to load, but a table that points past
        // the end is the cheapest sign of a cut file, and is read by tools.
        if h.e_shoff != 0 {
            guard h.e_shentsize == UInt16(MemoryLayout<Elf64_Shdr>.size) else {
                return "corrupt: section header size \(h.e_shentsize), not \(MemoryLayout<Elf64_Shdr>.size)"
            }
            // e_shnum 0 with a table: the count is in section 0's sh_size.
            var count = UInt64(h.e_shnum)
            if count == 0 {
                guard let first = end(h.e_shoff, 1, UInt64(h.e_shentsize)), first <= size,
                      let s0 = read(fd, offset: h.e_shoff, count: Int(h.e_shentsize)) else {
                    return "truncated or corrupt: its section headers start past the end of the file (\(size) bytes)"
                }
                count = s0.withUnsafeBytes { $0.loadUnaligned(as: Elf64_Shdr.self) }.sh_size
            }
            guard let shEnd = end(h.e_shoff, count, UInt64(h.e_shentsize)), shEnd <= size else {
                return "truncated or corrupt: its section headers end past the end of the file (\(size) bytes)"
            }
        }
        return nil
    }
}
