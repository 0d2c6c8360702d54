@preconcurrency import CVigilPlugin
import Glibc
import Synchronization
import VigilCore

/// A plugin known by its self-description: loaded in this process
/// (`LoadedPlugin`), or loaded by another process that sent its description
/// (a probe child: `ProbedPlugin`). What resolving a manifest needs of a plugin.
public protocol DescribedPlugin: Sendable {
    var description: PluginDescription { get }
}

/// A plugin module that passed negotiation: resident for the life of the
/// process (loaded with RTLD_NODELETE; never closed).
public final class LoadedPlugin: DescribedPlugin, @unchecked Sendable {  // immutable; the descriptor points at the plugin's permanent data
    public let description: PluginDescription
    /// The plugin's descriptor, copied into a zeroed struct of the host's size.
    package let descriptor: vigil_plugin_descriptor
    /// What its load took, step by step.
    public let phases: LoadPhases

    init(description: PluginDescription, descriptor: vigil_plugin_descriptor, phases: LoadPhases) {
        self.description = description
        self.descriptor = descriptor
        self.phases = phases
    }
}

/// The steps of one plugin's load, in nanoseconds: the file's checks
/// (owner, permissions, ELF headers), `dlopen`, the entry point (the
/// plugin builds its descriptor and chooses an ABI version), and the
/// host's reading and checking of the description. `vigil plugins describe
/// --timing` shows them (docs/performance.md, plugin load).
public struct LoadPhases: Sendable, Equatable {
    public var vetting: Int64 = 0
    public var dlopen: Int64 = 0
    public var entry: Int64 = 0
    public var reading: Int64 = 0

    public init(vetting: Int64 = 0, dlopen: Int64 = 0, entry: Int64 = 0, reading: Int64 = 0) {
        self.vetting = vetting
        self.dlopen = dlopen
        self.entry = entry
        self.reading = reading
    }
}

/// Why a plugin file was refused. The host logs it and goes on without it.
public struct PluginRefusal: Error, Sendable, CustomStringConvertible {
    public var path: String
    public var reason: String
    public var description: String { "plugin \(path) refused: \(reason)" }

    public init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }
}

/// Finds plugins by name in the plugin directories and loads them, at most
/// once per file.
public final class PluginCatalog: Sendable {
    /// Directories searched, in order.
    public let directories: [String]
    private let loaded = Mutex<[String: Result<LoadedPlugin, PluginRefusal>]>([:])

    /// The ABI versions this host speaks, best first.
    public static let offeredVersions = [vigil_abi_version(major: UInt16(VIGIL_ABI_MAJOR), minor: UInt16(VIGIL_ABI_MINOR))]
    public static let systemDirectory = "/usr/local/lib/vigil/plugins"

    /// What each file goes through before it is loaded (PluginFile.swift).
    package let vetting: PluginVetting

    public convenience init(directories: [String]) {
        self.init(directories: directories, vetting: PluginVetting())
    }

    package init(directories: [String], vetting: PluginVetting) {
        var seen = Set<String>()
        self.directories = directories.filter { seen.insert($0).inserted }
        self.vetting = vetting
    }

    /// The standard search path: `extra` (manifest's `plugin_dirs`, `--plugin-dir`),
    /// then the host's own directories (`ownDirectories`).
    public static func standardDirectories(extra: [String]) -> [String] {
        extra + ownDirectories()
    }

    /// The directories whose plugins ship with this host, in search order:
    /// the one holding the `vigil` executable (a build tree), the installed
    /// layout's `<executable's directory>/../lib/vigil/plugins` (`make install`
    /// with any prefix), and the system directory.
    public static func ownDirectories() -> [String] {
        var dirs: [String] = []
        if let exe = executableDirectory() {
            dirs.append(exe)
            dirs.append(installedDirectory(executableDirectory: exe))
        }
        dirs.append(systemDirectory)
        return dirs
    }

    /// `<dir>/../lib/vigil/plugins`, written without the `..`:
    /// /opt/vigil/bin gives /opt/vigil/lib/vigil/plugins.
    package static func installedDirectory(executableDirectory dir: String) -> String {
        var parts = dir.split(separator: "/", omittingEmptySubsequences: true)
        if !parts.isEmpty { parts.removeLast() }
        return "/" + (parts.map(String.init) + ["lib", "vigil", "plugins"]).joined(separator: "/")
    }

    package static func executableDirectory() -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        let path = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
    }

    /// The file that provides plugin `name`: `NAME.so` or `libNAME.so` in the
    /// first directory that has one.
    public func locate(_ name: String) -> String? {
        for dir in directories {
            // libvigil-NAME.so: a plugin whose libNAME.so would shadow a system library.
            for file in ["\(name).so", "lib\(name).so", "libvigil-\(name).so"] {
                let path = dir.hasSuffix("/") ? dir + file : "\(dir)/\(file)"
                if access(path, R_OK) == 0 { return path }
            }
        }
        return nil
    }

    /// Loads the plugin a manifest names: a name to look up, or a path.
    public func load(reference: String) -> Result<LoadedPlugin, PluginRefusal> {
        load(reference: reference, using: load(path:))
    }

    /// The plugin a manifest names — a name to look up, or a path — as
    /// `load` gets it from a file: loaded here, or described by a process
    /// that loaded it. A plugin found by name must describe itself by that name.
    package func load<Plugin: DescribedPlugin>(reference: String, using load: (String) -> Result<Plugin, PluginRefusal>)
        -> Result<Plugin, PluginRefusal> {
        let isPath = MonitorConfig.namesFile(reference)
        if isPath { return load(reference) }
        guard let path = locate(reference) else {
            return .failure(PluginRefusal(path: reference, reason:
                "no plugin named '\(reference)' in \(directories.joined(separator: ", "))"))
        }
        let result = load(path)
        if case .success(let plugin) = result, plugin.description.name != reference {
            return .failure(PluginRefusal(path: path, reason:
                "the file describes itself as plugin '\(plugin.description.name)', not '\(reference)'"))
        }
        return result
    }

    /// Loads, negotiates with and validates the plugin at `path`, once per file.
    public func load(path: String) -> Result<LoadedPlugin, PluginRefusal> {
        let key = PluginFile.realPath(of: path) ?? path
        return loaded.withLock { loaded in
            if let cached = loaded[key] { return cached }
            let result = PluginLoader.load(path: path, vetting: vetting)
            loaded[key] = result
            return result
        }
    }

    /// Every `.so` file in the plugin directories (first of each name wins).
    public func discover() -> [String] {
        var names = Set<String>()
        var paths: [String] = []
        for dir in directories {
            guard let d = opendir(dir) else { continue }
            var files: [String] = []
            while let entry = readdir(d) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
                }
                if name.hasSuffix(".so") { files.append(name) }
            }
            closedir(d)
            for file in files.sorted() where names.insert(file).inserted {
                paths.append(dir.hasSuffix("/") ? dir + file : "\(dir)/\(file)")
            }
        }
        return paths
    }

    /// Whether a file exports the entry symbol, without running any of its code
    /// beyond what dlopen runs.
    public static func exportsEntry(path: String) -> Bool {
        // The ELF checks only: nothing that dlopen could not map.
        guard case .success(let file) = PluginFile.open(path, policy: PluginFilePolicy(allowUnsafe: true)),
              let handle = dlopen(file.loadPath, RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE) else { return false }
        return dlsym(handle, VIGIL_ENTRY_SYMBOL) != nil
    }
}

/// dlopen, negotiation and validation of one plugin file.
package enum PluginLoader {
    package static func load(path: String, vetting: PluginVetting = PluginVetting()) -> Result<LoadedPlugin, PluginRefusal> {
        func refuse(_ reason: String) -> Result<LoadedPlugin, PluginRefusal> {
            .failure(PluginRefusal(path: path, reason: reason))
        }
        let began = monotonicNanoseconds()
        // Owner, permissions and ELF headers, checked on the open file (PluginFile.swift).
        let file: PluginFile
        switch vetting.open(path) {
        case .failure(let refusal): return refuse(refusal.reason)
        case .success(let checked): file = checked
        }
        _ = dlerror()
        let vetted = monotonicNanoseconds()
        guard let handle = dlopen(file.loadPath, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) else {
            let why = dlerror().map { String(cString: $0) } ?? "unknown dlopen error"
            return refuse("not a loadable shared object (\(why))")
        }
        if let problem = file.changedSinceChecked() { return refuse(problem) }
        guard let symbol = dlsym(handle, VIGIL_ENTRY_SYMBOL) else {
            return refuse("it does not export '\(VIGIL_ENTRY_SYMBOL)': not a Vigil plugin, or built without VIGIL_EXPORT")
        }
        if let problem = PluginFile.entrySymbolProblem(symbol, name: VIGIL_ENTRY_SYMBOL) { return refuse(problem) }
        let entry = unsafeBitCast(symbol, to: vigil_plugin_entry_fn.self)
        let opened = monotonicNanoseconds()
        return negotiate(path: path, phases: LoadPhases(vetting: vetted - began, dlopen: opened - vetted)) { args, result in
            entry(args, result)
        }
    }

    /// Negotiation and validation through an entry function: the one a file
    /// exports, or a Swift type's in a test process (VigilKitTesting).
    package static func negotiate(
        path: String, phases: LoadPhases = LoadPhases(),
        entry: (UnsafePointer<vigil_entry_args>, UnsafeMutablePointer<vigil_entry_result>) -> vigil_status
    ) -> Result<LoadedPlugin, PluginRefusal> {
        var phases = phases
        let entered = monotonicNanoseconds()
        func refuse(_ reason: String) -> Result<LoadedPlugin, PluginRefusal> {
            .failure(PluginRefusal(path: path, reason: reason))
        }
        // Negotiate: offer what we speak; the plugin picks.
        var message = [CChar](repeating: 0, count: 512)
        let versions = PluginCatalog.offeredVersions
        var result = vigil_entry_result()
        let status: vigil_status = versions.withUnsafeBufferPointer { offered in
            message.withUnsafeMutableBufferPointer { buffer in
                var args = vigil_entry_args()
                args.size = UInt32(MemoryLayout<vigil_entry_args>.size)
                args.version_count = UInt32(offered.count)
                args.versions = offered.baseAddress
                result.size = UInt32(MemoryLayout<vigil_entry_result>.size)
                result.error.size = UInt32(MemoryLayout<vigil_error>.size)
                result.error.message = buffer.baseAddress
                result.error.capacity = buffer.count
                return entry(&args, &result)
            }
        }
        let answered = monotonicNanoseconds()
        phases.entry = answered - entered
        let pluginMessage = pluginMessage(message)
        let host = "\(VIGIL_ABI_MAJOR).\(VIGIL_ABI_MINOR)"
        guard status == VIGIL_OK else {
            let why = pluginMessage.isEmpty ? "no reason given" : pluginMessage
            return refuse("its entry point refused the host's ABI \(host) (status \(status.rawValue)): \(why)")
        }
        let chosen = "\(result.abi_major).\(result.abi_minor)"
        if let problem = abiProblem(major: Int(result.abi_major), minor: Int(result.abi_minor)) { return refuse(problem) }
        guard let rawDescriptor = result.descriptor else {
            return refuse("malformed self-description: its entry point returned no descriptor")
        }
        // Copy min(their size, our size) into a zeroed descriptor; never read beyond their size.
        let theirSize = Int(UnsafeRawPointer(rawDescriptor).loadUnaligned(as: UInt32.self))
        let required = ABISizes.descriptor
        guard theirSize >= required else {
            return refuse("malformed self-description: descriptor size is \(theirSize) bytes, ABI \(chosen) needs at least \(required)")
        }
        var descriptor = vigil_plugin_descriptor()
        withUnsafeMutableBytes(of: &descriptor) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: rawDescriptor,
                                                        count: min(theirSize, MemoryLayout<vigil_plugin_descriptor>.size)))
        }
        switch describe(descriptor, path: path, abiMajor: Int(result.abi_major), abiMinor: Int(result.abi_minor)) {
        case .failure(let problem): return refuse("malformed self-description: \(problem)")
        case .success(let description):
            // An output may leave start and stop out: every caller meets a
            // function that does nothing rather than a NULL.
            if description.kind == .output {
                if descriptor.start == nil { descriptor.start = { _, _ in VIGIL_OK } }
                if descriptor.stop == nil { descriptor.stop = { _, _ in VIGIL_OK } }
            }
            phases.reading = monotonicNanoseconds() - answered
            return .success(LoadedPlugin(description: description, descriptor: descriptor, phases: phases))
        }
    }

    /// Why this host cannot speak the ABI version a plugin chose, or nil.
    package static func abiProblem(major: Int, minor: Int) -> String? {
        let host = "\(VIGIL_ABI_MAJOR).\(VIGIL_ABI_MINOR)"
        let chosen = "\(major).\(minor)"
        guard major == Int(VIGIL_ABI_MAJOR) else {
            return "it was built for Vigil ABI \(chosen); this host speaks ABI \(host) (major \(VIGIL_ABI_MAJOR) only). Rebuild it against this host's vigil_plugin.h"
        }
        guard minor >= 0, minor <= Int(VIGIL_ABI_MINOR) else {
            return "it needs Vigil ABI \(chosen), newer than this host's ABI \(host). Upgrade vigil, or rebuild the plugin against ABI \(host)"
        }
        return nil
    }

    struct Malformed: Error, CustomStringConvertible {
        var why: String
        var description: String { why }
    }

    static func describe(_ d: vigil_plugin_descriptor, path: String, abiMajor: Int, abiMinor: Int)
        -> Result<PluginDescription, Malformed> {
        do {
            let kind: PluginDescription.Kind
            switch d.kind {
            case UInt32(VIGIL_PLUGIN_MONITOR.rawValue):
                kind = .monitor
                guard d.create != nil, d.start != nil, d.stop != nil, d.destroy != nil else {
                    throw Malformed(why: "create, start, stop and destroy are required (one is NULL)")
                }
            case UInt32(VIGIL_PLUGIN_OUTPUT.rawValue) where abiMinor >= 5:
                // `write` and `flush` are 1.5's; a descriptor too short for them has them zeroed.
                kind = .output
                guard d.create != nil, d.destroy != nil, d.write != nil else {
                    throw Malformed(why: "an output needs create, destroy and write (one is NULL, or its descriptor is shorter than ABI 1.5's)")
                }
                guard d.poll == nil, d.event_count == 0 else {
                    throw Malformed(why: "an output has no poll and declares no event kinds")
                }
            case UInt32(VIGIL_PLUGIN_OUTPUT.rawValue):
                throw Malformed(why: "an output plugin needs ABI 1.5 or later; it chose \(abiMajor).\(abiMinor)")
            default:
                throw Malformed(why: "plugin kind \(d.kind) is not one this host loads (1 = monitor, 2 = output)")
            }
            let name = try text(d.name, "name")
            let options = try array(d.options, count: d.option_count, minimum: ABISizes.optionSpec, what: "option") { (o: vigil_option_spec) in
                guard let type = ValueType(rawValue: o.type) else {
                    throw Malformed(why: "option '\(try text(o.name, "option name"))' has unknown type \(o.type)")
                }
                let defaultText = try text(o.default_text, "option default")
                // `example_text` is 1.3's: read only from a plugin that chose 1.3 or later
                // (beyond the element size the copy is zeroes: an empty text).
                let exampleText = abiMinor >= 3 ? try text(o.example_text, "option example") : ""
                return OptionSpec(name: try text(o.name, "option name"), type: type,
                                  defaultText: defaultText.isEmpty ? nil : defaultText,
                                  doc: try text(o.doc, "option doc"),
                                  required: o.flags & UInt32(VIGIL_OPTION_REQUIRED) != 0,
                                  exampleText: exampleText.isEmpty ? nil : exampleText)
            }
            let events = try array(d.events, count: d.event_count, minimum: ABISizes.eventSpec, what: "event kind") { (e: vigil_event_spec) in
                let kind = try text(e.kind, "event kind")
                let fields = try array(e.fields, count: e.field_count, minimum: ABISizes.fieldSpec, what: "field of '\(kind)'") { (f: vigil_field_spec) in
                    guard let type = ValueType(rawValue: f.type) else {
                        throw Malformed(why: "field '\(try text(f.name, "field name"))' of kind '\(kind)' has unknown type \(f.type)")
                    }
                    // `flags` is 1.4's: read only from a plugin that chose 1.4 or later
                    // (beyond the element size the copy is zeroes: no flags).
                    let flags = abiMinor >= 4 ? f.flags : 0
                    return FieldSpec(name: try text(f.name, "field name"), type: type,
                                     unit: try text(f.unit, "field unit"), doc: try text(f.doc, "field doc"),
                                     identity: flags & UInt32(VIGIL_FIELD_IDENTITY) != 0,
                                     counter: flags & UInt32(VIGIL_FIELD_COUNTER) != 0)
                }
                // `flags` was `reserved` (0) before 1.2: read it only from 1.2 plugins.
                let flags = abiMinor >= 2 ? e.flags : 0
                return EventSpec(kind: kind, doc: try text(e.doc, "event doc"), fields: fields,
                                 dynamicFields: flags & UInt32(VIGIL_EVENT_DYNAMIC_FIELDS) != 0,
                                 onChange: abiMinor >= 4 && flags & UInt32(VIGIL_EVENT_ON_CHANGE) != 0)
            }
            let description = PluginDescription(
                name: name, version: try text(d.version, "version"), summary: try text(d.description, "description"),
                abiMajor: abiMajor, abiMinor: abiMinor, options: options, events: events,
                defaultInterval: kind == .output ? 0 : d.default_interval_ns, polled: d.poll != nil, path: path, kind: kind)
            let problems = description.problems()
            guard problems.isEmpty else { throw Malformed(why: problems.joined(separator: "; ")) }
            return .success(description)
        } catch let error as Malformed {
            return .failure(error)
        } catch {
            return .failure(Malformed(why: "\(error)"))
        }
    }

    /// A descriptor string: UTF-8 (repaired), at most `PluginDescription.maxTextBytes`
    /// (checked before reading it), NULL only when empty.
    static func text(_ s: vigil_str, _ what: String) throws -> String {
        if s.len == 0 { return "" }
        guard let ptr = s.ptr else { throw Malformed(why: "\(what) has length \(s.len) but a NULL pointer") }
        let limit = PluginDescription.maxTextBytes
        guard s.len <= limit else {
            throw Malformed(why: "\(what) is \(s.len) bytes long (\(Units.formatSize(Int64(limit))) at most)")
        }
        return String(decoding: UnsafeRawBufferPointer(start: ptr, count: s.len), as: UTF8.self)
    }

    /// Reads an array of size-prefixed structs: the element stride is the size
    /// the plugin wrote in the first element; each element must carry the same
    /// size, at least the 1.0 size, a multiple of 8 and at most 4096; at most
    /// `PluginDescription.maxDeclarations` elements (checked before reading). Each is
    /// copied as min(its size, ours) into a zeroed struct: fields a newer
    /// plugin added are ignored, fields an older one lacks read as zero.
    static func array<Element, T>(_ base: UnsafePointer<Element>?, count: Int, minimum: Int, what: @autoclosure () -> String,
                                  _ convert: (Element) throws -> T) throws -> [T] {
        if count == 0 { return [] }
        guard let base else { throw Malformed(why: "\(count) \(what())s declared but the pointer is NULL") }
        let limit = PluginDescription.maxDeclarations
        guard count <= limit else { throw Malformed(why: "\(count) \(what())s declared (\(limit) at most)") }
        let raw = UnsafeRawPointer(base)
        let stride = Int(raw.loadUnaligned(as: UInt32.self))
        guard stride >= minimum, stride % 8 == 0, stride <= 4096 else {
            throw Malformed(why: "\(what()) struct size is \(stride) bytes; ABI 1.0 needs at least \(minimum), a multiple of 8, at most 4096")
        }
        var out: [T] = []
        out.reserveCapacity(count)
        for i in 0..<count {
            let element = raw + i * stride
            let size = Int(element.loadUnaligned(as: UInt32.self))
            guard size == stride else {
                throw Malformed(why: "\(what()) #\(i + 1) has size \(size), the first has \(stride); all must match")
            }
            out.append(try convert(copyStruct(Element.self, from: element, size: size)))
        }
        return out
    }

    /// min(size, ours) bytes of a plugin's struct, in a zeroed struct of ours.
    /// On the stack: a heap block per struct was a malloc and a free for
    /// each field of a description.
    package static func copyStruct<T>(_ type: T.Type, from source: UnsafeRawPointer, size: Int) -> T {
        withUnsafeTemporaryAllocation(byteCount: MemoryLayout<T>.size, alignment: MemoryLayout<T>.alignment) { storage in
            storage.initializeMemory(as: UInt8.self, repeating: 0)
            storage.baseAddress!.copyMemory(from: source, byteCount: min(size, MemoryLayout<T>.size))
            return storage.load(as: T.self)
        }
    }
}

/// The 1.0 sizes of the structs that may grow (VIGIL_*_SIZE_1_0 in the
/// header): the least a reader accepts, whatever its own sizeof.
package enum ABISizes {
    package static let event = MemoryLayout<vigil_event>.offset(of: \vigil_event.field_count)! + MemoryLayout<Int>.size
    package static let optionSpec = MemoryLayout<vigil_option_spec>.offset(of: \vigil_option_spec.reserved)! + 4
    /// VIGIL_OPTION_SPEC_SIZE_1_3: with `example_text`.
    package static let optionSpec1_3 = MemoryLayout<vigil_option_spec>.offset(of: \vigil_option_spec.example_text)!
        + MemoryLayout<vigil_str>.size
    package static let fieldSpec = MemoryLayout<vigil_field_spec>.offset(of: \vigil_field_spec.doc)! + MemoryLayout<vigil_str>.size
    package static let eventSpec = MemoryLayout<vigil_event_spec>.offset(of: \vigil_event_spec.field_count)! + MemoryLayout<Int>.size
    package static let descriptor = MemoryLayout<vigil_plugin_descriptor>.offset(of: \vigil_plugin_descriptor.destroy)!
        + MemoryLayout<UnsafeRawPointer>.size
}
