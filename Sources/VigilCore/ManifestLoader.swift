/// Reads a manifest's text into a `Manifest`, reporting every problem it can
/// find in one pass, each with its file, line and column. Reads no files
/// itself: the main manifest's bytes are given, or read with `source`, which
/// also reads what `include:` names (see ManifestIncludes.swift).
public struct ManifestLoader {
    public var file: String
    public var environment: [String: String]
    /// Reads the fragments `include:` names. Nil: the patterns are checked and
    /// kept in `Manifest.includes`, but no fragment is read (a check of one
    /// file alone).
    public var source: (any ManifestSource)?
    /// The sink types `type:` may name (the host's: `SinkTypes.standard`).
    package var sinkTypes: SinkTypes

    package init(file: String, environment: [String: String] = [:], source: (any ManifestSource)? = nil, sinkTypes: SinkTypes) {
        self.file = file
        self.environment = environment
        self.source = source
        self.sinkTypes = sinkTypes
    }

    static let hostWideKeys = ["host", "log_level", "plugin_dirs", "allow_unsafe_plugins", "isolation", "interval"]
    static let fragmentKeys = ["monitors", "sinks", "rules"]
    static let topKeys = ["host", "log_level", "plugin_dirs", "monitors", "sinks", "rules", "allow_unsafe_plugins", "isolation", "interval", "include"]
    static let monitorKeys = ["plugin", "interval", "timeout", "enabled", "options", "thresholds"] + isolationKeys
    /// Every sink's keys; a type's own are its `SinkSettings.keys`, and
    /// `buffer` is read here for the types that take a disk buffer.
    static let sinkCommonKeys = ["type", "match", "min_severity", "queue_size", "overflow", "buffer"]
    /// A sink's `buffer:` mapping.
    static let bufferKeys = ["type", "path", "max_size", "when_full", "fsync"]

    /// The manifest as far as it could be read (nil only when the text is not a
    /// YAML mapping), plus every diagnostic. Any error means the manifest is
    /// invalid and must not be run; the partial model lets `vigil validate` go on
    /// to check plugins and options in the same pass.
    public func load(_ text: String) -> (Manifest?, [Diagnostic]) {
        var text = text
        return text.withUTF8 { load(utf8: $0) }
    }

    /// The manifest from a file's bytes as read: a NUL or invalid UTF-8 is an
    /// error at its place, never a reason to read less.
    public func load(bytes: [UInt8]) -> (Manifest?, [Diagnostic]) {
        bytes.withUnsafeBufferPointer { load(utf8: $0) }
    }

    public func load(utf8 bytes: UnsafeBufferPointer<UInt8>) -> (Manifest?, [Diagnostic]) {
        load(utf8: bytes, identity: nil)
    }

    /// The manifest `file` as `source` reads it, with its includes. At most
    /// one byte past the size limit is read, so /dev/zero or a huge file
    /// costs nothing.
    public func load(from source: any ManifestSource) -> (Manifest?, [Diagnostic]) {
        var loader = self
        loader.source = source
        let start = SourceLocation(file: file, line: 1, column: 1)
        let main: ManifestSourceFile
        do {
            main = try source.read(file, limit: ManifestLimits.maxFileBytes, fragment: false)
        } catch {
            let why = switch error.code {
            case .notFound: "no such file"
            case .isDirectory: "it is a directory, not a manifest"
            default: "cannot read it: \(error.reason)"
            }
            return (nil, [Diagnostic(at: start, why)])
        }
        return main.bytes.withUnsafeBufferPointer { loader.load(utf8: $0, identity: main.identity) }
    }

    /// `identity`: the main file's, when a source read it.
    func load(utf8 bytes: UnsafeBufferPointer<UInt8>, identity: String?) -> (Manifest?, [Diagnostic]) {
        guard bytes.count <= ManifestLimits.maxFileBytes else {
            return (nil, [Diagnostic(at: SourceLocation(file: file, line: 1, column: 1),
                                     "the manifest is larger than the limit of \(Units.formatSize(Int64(ManifestLimits.maxFileBytes)))",
                                     hint: "a manifest is a page or two of YAML; is this the right file?")])
        }
        let (root, parseDiagnostics) = ConfigParser(file: file, environment: environment).parse(utf8: bytes)
        var d = Diags(items: parseDiagnostics)
        guard let root else { return (nil, d.items) }
        guard case .mapping(let entries, _) = root else {
            d.error(root.location, "the manifest must be a mapping with 'monitors:' and 'sinks:', not \(root.kindName)")
            return (nil, d.items)
        }
        var manifest = Manifest(file: file)
        let top = Keys(entries, context: "the manifest", known: Self.topKeys)
        top.reportUnknown(into: &d)
        if let host = top["host"] { manifest.host = d.string(host, what: "'host'") }
        if let level = top["log_level"] {
            manifest.logLevel = d.severity(level, what: "'log_level'") ?? .info
        }
        if let dirs = top["plugin_dirs"] { manifest.pluginDirs = d.stringList(dirs, what: "'plugin_dirs'") }
        if let allow = top["allow_unsafe_plugins"] {
            manifest.allowUnsafePlugins = d.bool(allow, what: "'allow_unsafe_plugins'") ?? false
        }
        let isolation = top["isolation"].flatMap { loadIsolation($0, &d) }
        (manifest.isolation, manifest.isolationLocation) = (isolation?.0, isolation?.1)
        if let interval = top["interval"], let ns = d.duration(interval, what: "'interval'", atLeast: 1_000_000) {
            manifest.interval = ns
        }
        var parts = [ManifestPart(file: file, keys: top, location: root.location)]
        if let include = top["include"] {
            manifest.includes = d.locatedStrings(include, what: "'include'").map { IncludePattern(pattern: $0.0, location: $0.1) }
            if let source {
                parts += readFragments(from: source, mainIdentity: identity, mainBytes: bytes.count, into: &manifest, &d)
            }
        }
        // Unread fragments may hold what the main file lacks.
        let complete = source != nil || manifest.includes.isEmpty
        assemble(parts, into: &manifest, isolation: isolation, complete: complete, &d)
        return (manifest, d.items)
    }

    /// The monitors, rules and sinks of every part (the main file first, then
    /// each fragment in the order read) as one manifest, checked as one: a
    /// name defined in two places is an error at both.
    private func assemble(_ parts: [ManifestPart], into manifest: inout Manifest, isolation: (Isolation, SourceLocation)?,
                          complete: Bool, _ d: inout Diags) {
        let main = parts[0]
        for part in parts { if let node = part.keys["monitors"] { manifest.monitors += loadMonitors(node, isolation: isolation, &d) } }
        if complete, !parts.contains(where: { $0.keys["monitors"] != nil }) {
            d.error(main.location, "the manifest has no 'monitors:'", hint: "add a 'monitors:' mapping, e.g. monitors: { cpu: { plugin: cpu } }")
        }
        manifest.monitors = Self.unique(manifest.monitors, what: "monitor", name: \.name, location: \.location, &d)
        // The top-level interval, collectd's global `Interval`: each monitor's own, else this one, else its plugin's.
        if let interval = manifest.interval {
            for i in manifest.monitors.indices where manifest.monitors[i].interval == nil { manifest.monitors[i].interval = interval }
        }
        for part in parts { if let node = part.keys["rules"] { manifest.rules += loadRules(node, &d) } }
        manifest.rules = Self.unique(manifest.rules, what: "rule", name: \.name, location: \.location, &d)
        for rule in manifest.rules {
            if rule.name == Manifest.hostMonitorName {
                d.error(rule.location, "rule '\(rule.name)' has the name of a monitor; its events are routed as '\(rule.name)/rule', so the names must differ")
            } else if let monitor = manifest.monitors.first(where: { $0.name == rule.name }) {
                d.error(rule.location, "rule '\(rule.name)' has the name of a monitor; its events are routed as '\(rule.name)/rule', so the names must differ",
                        hint: monitor.location.file == rule.location.file ? nil : "the monitor is at \(monitor.location)")
                if monitor.location.file != rule.location.file {
                    d.error(monitor.location, "monitor '\(rule.name)' has the name of a rule; the names must differ", hint: "the rule is at \(rule.location)")
                }
            }
        }
        let sinkNodes = parts.compactMap { $0.keys["sinks"] }
        for node in sinkNodes { manifest.sinks += loadSinks(node, &d) }
        manifest.sinks = Self.unique(manifest.sinks, what: "sink", name: \.name, location: \.location, &d)
        checkSinks(manifest, complete: complete, &d)
        if manifest.sinks.count > SinkSet.capacity {
            d.error(sinkNodes.first?.location ?? main.location,
                    "at most \(SinkSet.capacity) sinks are supported, this manifest has \(manifest.sinks.count)")
        }
        // With no sink every event is lost. A warning, not an error: a manifest
        // whose rules run programs (`exec:`) does its work without a sink, and a
        // plugin's author checks that it loads with one monitor and nothing else.
        // One that means to discard its events says so with a null sink.
        guard complete else { return }
        let declaresNoSink = sinkNodes.allSatisfy { node in
            switch node {
            case .scalar(let s): s.isNull
            case .mapping(let entries, _): entries.isEmpty
            default: false  // reported as the wrong shape
            }
        }
        if declaresNoSink {
            d.warning(sinkNodes.first?.location ?? main.location,
                      sinkNodes.isEmpty ? "the manifest has no 'sinks:': every event would be lost" : "'sinks' is empty: every event would be lost",
                      hint: "add one, e.g. sinks: { console: { type: log } }; to discard events on purpose: sinks: { discard: { type: null } }")
        }
    }

    /// The first definition of each name; every other one is an error at its
    /// place and at the first's, each naming the other. (Within one file the
    /// parser has reported a repeated key already, and kept the first.)
    static func unique<Item>(_ items: [Item], what: String, name: (Item) -> String, location: (Item) -> SourceLocation,
                             _ d: inout Diags) -> [Item] {
        var first: [String: SourceLocation] = [:]
        var kept: [Item] = []
        for item in items {
            let key = name(item), at = location(item)
            if let earlier = first[key] {
                d.error(earlier, "\(what) '\(key)' is defined twice: here and at \(at)", hint: "names must be unique across the manifest and its includes; rename or remove one")
                d.error(at, "\(what) '\(key)' is defined twice: here and at \(earlier)", hint: "names must be unique across the manifest and its includes; rename or remove one")
            } else {
                first[key] = at
                kept.append(item)
            }
        }
        return kept
    }

    // MARK: monitors

    private func loadMonitors(_ node: ConfigNode, isolation: (Isolation, SourceLocation)?, _ d: inout Diags) -> [MonitorConfig] {
        var result: [MonitorConfig] = []
        for entry in d.entries(of: node, mustBe: "'monitors' must be a mapping of monitor names to settings") {
            let name = entry.key.text
            guard d.checkName(entry.key, what: "monitor") else { continue }
            if name == Manifest.hostMonitorName {
                d.error(entry.key.location, "'\(name)' is reserved for the host's own events", hint: "pick another monitor name")
                continue
            }
            guard case .mapping(let fields, _) = entry.value else {
                d.error(entry.value.location, "monitor '\(name)' must be a mapping with at least 'plugin:', not \(entry.value.kindName)",
                        hint: "\(name): { plugin: \(name) }")
                continue
            }
            let keys = Keys(fields, context: "monitor '\(name)'", known: Self.monitorKeys)
            keys.reportUnknown(into: &d)
            var monitor = MonitorConfig(name: name, plugin: "", location: entry.key.location)
            if let plugin = keys["plugin"], let text = d.string(plugin, what: "'plugin'") {
                if text.isEmpty { d.error(plugin.location, "'plugin' is empty") }
                monitor.plugin = text
                monitor.pluginLocation = plugin.location
            } else if keys["plugin"] == nil {
                d.error(entry.key.location, "monitor '\(name)' has no 'plugin'", hint: "name a plugin (see 'vigil plugins list') or a path to a .so")
            }
            if let interval = keys["interval"], let ns = d.duration(interval, what: "'interval'", atLeast: 1_000_000) {
                monitor.interval = ns
            }
            if let timeout = keys["timeout"], let ns = d.duration(timeout, what: "'timeout'", atLeast: 1_000_000) {
                monitor.timeout = ns
            }
            if let enabled = keys["enabled"] { monitor.enabled = d.bool(enabled, what: "'enabled'") ?? true }
            if let thresholds = keys["thresholds"] { monitor.thresholds = loadThresholds(thresholds, monitor: name, &d) }
            loadIsolationKeys(keys, into: &monitor, inherited: isolation, &d)
            if let options = keys["options"] {
                monitor.optionsLocation = options.location
                switch options {
                case .mapping(let opts, _): monitor.options = opts
                case .scalar(let s) where s.isNull: break
                default: d.error(options.location, "'options' must be a mapping, not \(options.kindName)")
                }
            }
            result.append(monitor)
        }
        return result
    }

    // MARK: sinks

    private func loadSinks(_ node: ConfigNode, _ d: inout Diags) -> [SinkConfig] {
        var result: [SinkConfig] = []
        for entry in d.entries(of: node, mustBe: "'sinks' must be a mapping of sink names to settings") {
            let name = entry.key.text
            guard d.checkName(entry.key, what: "sink") else { continue }
            guard case .mapping(let fields, _) = entry.value else {
                d.error(entry.value.location, "sink '\(name)' must be a mapping with at least 'type:', not \(entry.value.kindName)")
                continue
            }
            let typeNode = fields.first(where: { $0.key.text == "type" })?.value
            guard let typeNode else {
                d.error(entry.key.location, "sink '\(name)' has no 'type'", hint: "one of: \(sinkTypes.names.joined(separator: ", "))")
                continue
            }
            guard let typeName = d.choice(typeNode, what: "sink type", from: sinkTypes.names),
                  let type = sinkTypes.named(typeName) else { continue }
            let keys = Keys(fields, context: "sink '\(name)' (type \(typeName))", known: type.keys + Self.sinkCommonKeys)
            keys.reportUnknown(into: &d)
            guard let settings = type.read(SinkDeclaration(name: name, location: entry.key.location, keys: keys, loader: self), &d)
            else { continue }
            var sink = SinkConfig(name: name, settings: settings, location: entry.key.location)
            if let node = keys["buffer"] {
                loadBuffer(node, into: &sink, &d)
            }
            if let match = keys["match"] {
                let patterns = d.locatedStrings(match, what: "'match'")
                sink.match = patterns.map(\.0)
                sink.matchLocations = patterns.map(\.1)
                for (pattern, at) in patterns {
                    if let problem = RoutePattern.problem(in: pattern) {
                        d.error(at, "bad pattern '\(pattern)' in 'match': \(problem)")
                    }
                }
            }
            if let severity = keys["min_severity"] {
                sink.minSeverity = d.severity(severity, what: "'min_severity'") ?? .debug
            }
            if let size = keys["queue_size"], let n = d.int(size, what: "'queue_size'", in: 1...ManifestLimits.maxQueueSize, unit: " events") {
                sink.queueCapacity = Int(n)
            }
            if let overflow = keys["overflow"] {
                sink.overflow = d.choice(overflow, what: "'overflow'", of: OverflowPolicy.self) ?? .dropOldest
            }
            result.append(sink)
        }
        return result
    }

    /// What can only be checked with every sink and monitor known: match
    /// patterns that name no monitor (when every fragment was read), and two
    /// sinks on one resource. Two sinks on one file would rotate each other's
    /// data away; two on one listen address cannot both bind.
    private func checkSinks(_ manifest: Manifest, complete: Bool, _ d: inout Diags) {
        let monitorNames = manifest.monitors.map(\.name) + [Manifest.hostMonitorName] + manifest.rules.map(\.name)
        for sink in manifest.sinks where complete {
            for (pattern, at) in zip(sink.match, sink.matchLocations) {
                if RoutePattern.problem(in: pattern) == nil, let literal = RoutePattern.literalMonitor(in: pattern), !monitorNames.contains(literal) {
                    d.warning(at, "pattern '\(pattern)' matches no monitor of this manifest",
                              hint: Suggest.hint(for: literal, in: monitorNames))
                }
            }
        }
        // Disk buffers: one directory each, none inside another (`a`, `a/`,
        // `a/../a` and `a/sub` are all the same place or share it).
        var buffers: [(path: String, sink: String, at: SourceLocation)] = []
        for sink in manifest.sinks {
            guard let buffer = sink.settings.diskBuffer, buffer.kind == .disk else { continue }
            let path = Self.normalizedPath(buffer.path)
            if let other = buffers.first(where: { $0.path == path || path.hasPrefix($0.path + "/") || $0.path.hasPrefix(path + "/") }) {
                d.error(buffer.location, "sinks '\(other.sink)' and '\(sink.name)' both use the disk buffer directory \(other.path == path ? path : "\(other.path) and \(path), one inside the other")",
                        hint: "'\(other.sink)' is at \(other.at); give each sink a directory of its own")
            } else {
                buffers.append((path, sink.name, sink.location))
            }
        }
        var claimed: [String: (String, SourceLocation)] = [:]
        for sink in manifest.sinks {
            for resource in sink.settings.exclusiveResources {
                if let (other, at) = claimed[resource] {
                    d.error(sink.location, "sinks '\(other)' and '\(sink.name)' both use \(resource)",
                            hint: "'\(other)' is at \(at); give each sink its own")
                } else {
                    claimed[resource] = (sink.name, sink.location)
                }
            }
        }
    }

    /// A name from the manifest as an error shows it: control characters escaped.
    package static func shown(_ text: String) -> String {
        var out = "'"
        for c in text.unicodeScalars {
            if c.value < 0x20 || c.value == 0x7F {
                let hex = String(c.value, radix: 16)
                out += "\\x" + (hex.count < 2 ? "0" + hex : hex)
            } else {
                out.unicodeScalars.append(c)
            }
        }
        return out + "'"
    }

    /// A path with `.`, `..`, repeated and trailing `/` resolved in text
    /// (relative ones stay relative; symbolic links are not followed here:
    /// the buffer's lock catches what text cannot).
    static func normalizedPath(_ path: String) -> String {
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == "..", let last = parts.last, last != ".." { parts.removeLast(); continue }
            parts.append(part)
        }
        let joined = parts.joined(separator: "/")
        return path.hasPrefix("/") ? "/" + joined : (joined.isEmpty ? "." : joined)
    }

    /// `buffer: { type: memory | disk, path, max_size, when_full, fsync }`.
    /// Memory is the sink's own queue (`queue_size` events), `when_full` its
    /// overflow policy; disk is a directory of segment files
    /// (DiskBufferedSink), for sinks that connect to a peer over a stream.
    private func loadBuffer(_ node: ConfigNode, into config: inout SinkConfig, _ d: inout Diags) {
        let name = config.name
        guard let b = Keys(nested: node, what: "'buffer'", of: "sink '\(name)'", known: Self.bufferKeys,
                           example: "buffer: { type: disk, path: /var/lib/vigil/buffer/NAME, max_size: 1GiB, when_full: block }", &d) else { return }
        guard let typeNode = b["type"] else {
            d.error(node.location, "'buffer' needs a 'type': memory or disk")
            return
        }
        guard let type = d.choice(typeNode, what: "'buffer.type'", of: SinkBufferConfig.Kind.self) else { return }
        var whenFull: SinkBufferConfig.WhenFull = .block
        if let n = b["when_full"] { whenFull = d.choice(n, what: "'buffer.when_full'", of: SinkBufferConfig.WhenFull.self) ?? .block }
        if type == .memory {
            for key in ["path", "max_size", "fsync"] {
                if let n = b[key] {
                    d.error(n.location, "'\(key)' is a disk buffer's; a memory buffer is the sink's queue, bounded by 'queue_size' (events)")
                }
            }
            if b["when_full"] != nil {
                config.overflow = switch whenFull {
                case .block: .block
                case .dropOldest: .dropOldest
                case .dropNewest: .dropNewest
                }
            }
            return
        }
        // A disk buffer holds what a peer has not taken yet.
        if let refusal = config.settings.diskBufferRefusal {
            d.error(typeNode.location, refusal)
            return
        }
        guard let pathNode = b["path"], let path = d.string(pathNode, what: "'buffer.path'") else {
            if b["path"] == nil { d.error(node.location, "a disk buffer needs a 'path': a directory of its own", hint: "path: /var/lib/vigil/buffer/\(name)") }
            return
        }
        guard !path.isEmpty else {
            d.error(pathNode.location, "'buffer.path' is empty")
            return
        }
        var buffer = SinkBufferConfig(kind: .disk, path: path, location: pathNode.location)
        buffer.whenFull = whenFull
        if let n = b["max_size"], let bytes = d.size(n, what: "'buffer.max_size'", atMost: 1 << 50, limitText: "1PiB") {
            if bytes < 1 << 20 { d.error(n.location, "'buffer.max_size' must be at least 1MiB") } else { buffer.maxSize = bytes }
        }
        if let n = b["fsync"] { buffer.fsync = d.choice(n, what: "'buffer.fsync'", of: SinkBufferConfig.Fsync.self) ?? .interval }
        config.settings.diskBuffer = buffer
    }

    /// `retry_min` and `retry_max` (`reconnect_min` and `reconnect_max`, the
    /// older names, still read): the backoff of a connecting sink.
    package static func backoff(_ keys: Keys, min low: inout Int64, max high: inout Int64, _ d: inout Diags) {
        for (name, old) in [("retry_min", "reconnect_min"), ("retry_max", "reconnect_max")] {
            if let a = keys[name], let b = keys[old] {
                d.error(b.location, "'\(old)' is the older name of '\(name)' (line \(a.location.line)); give one")
            }
        }
        if let n = keys["retry_min"] ?? keys["reconnect_min"],
           let ns = d.duration(n, what: keys["retry_min"] != nil ? "'retry_min'" : "'reconnect_min'") {
            // At least 10ms: a dead peer must not be retried in a busy loop.
            low = Swift.max(ns, 10_000_000)
        }
        if let n = keys["retry_max"] ?? keys["reconnect_max"],
           let ns = d.duration(n, what: keys["retry_max"] != nil ? "'retry_max'" : "'reconnect_max'") {
            high = Swift.max(ns, low)
        }
    }
}

/// The keys of one mapping, with a record of which were read.
package struct Keys {
    package var entries: [ConfigEntry]
    package var context: String
    package var known: [String]

    package init(_ entries: [ConfigEntry], context: String, known: [String]) {
        self.entries = entries
        self.context = context
        self.known = known
    }

    /// The keys of a mapping nested in another (`rotate:` of a sink, `limits:`
    /// of a monitor), its unknown keys reported; nil, reported, when `node` is
    /// not a mapping. `example` is the hint for that.
    package init?(nested node: ConfigNode, what: String, of context: String, known: [String], example: String, _ d: inout Diags) {
        guard case .mapping(let entries, _) = node else {
            d.error(node.location, "\(what) must be a mapping, not \(node.kindName)", hint: example)
            return nil
        }
        self.init(entries, context: "\(what) of \(context)", known: known)
        reportUnknown(into: &d)
    }

    package subscript(key: String) -> ConfigNode? {
        entries.first(where: { $0.key.text == key })?.value
    }

    package func reportUnknown(into d: inout Diags) {
        for entry in entries where !known.contains(entry.key.text) {
            d.error(entry.key.location, "unknown key '\(entry.key.text)' in \(context)",
                    hint: Suggest.hint(for: entry.key.text, in: known) ?? "known keys: \(known.joined(separator: ", "))")
        }
    }
}

/// Collects diagnostics and converts nodes to typed values, reporting type errors.
package struct Diags {
    package var items: [Diagnostic] = []
    package init(items: [Diagnostic] = []) { self.items = items }
    package var hasErrors: Bool { items.contains { $0.level == .error } }

    package mutating func error(_ at: SourceLocation, _ message: String, hint: String? = nil) {
        items.append(Diagnostic(.error, at: at, message, hint: hint))
    }

    package mutating func warning(_ at: SourceLocation, _ message: String, hint: String? = nil) {
        items.append(Diagnostic(.warning, at: at, message, hint: hint))
    }

    package mutating func note(_ at: SourceLocation, _ message: String, hint: String? = nil) {
        items.append(Diagnostic(.note, at: at, message, hint: hint))
    }

    /// The entries of a section that maps names to settings (`monitors:`,
    /// `rules:`, a monitor's `thresholds:`…): none when it is empty, and
    /// none, reported as `mustBe` says (with `hint`), when it is not a mapping.
    package mutating func entries(of section: ConfigNode, mustBe: String, hint: String? = nil) -> [ConfigEntry] {
        guard case .mapping(let entries, _) = section else {
            if section.scalar?.isNull != true { error(section.location, "\(mustBe), not \(section.kindName)", hint: hint) }
            return []
        }
        return entries
    }

    package mutating func checkName(_ key: ConfigScalar, what: String) -> Bool {
        let ok = !key.text.isEmpty && key.text.unicodeScalars.allSatisfy {
            ($0.properties.isAlphabetic && $0.isASCII) || ("0"..."9").contains($0) || $0 == "_" || $0 == "-" || $0 == "."
        }
        if !ok {
            error(key.location, "'\(key.text)' is not a valid \(what) name",
                  hint: "use letters, digits, '_', '-' and '.'; '/' and glob characters are reserved for routing")
        }
        return ok
    }

    package mutating func string(_ node: ConfigNode, what: String) -> String? {
        guard case .scalar(let s) = node, !s.isNull else {
            error(node.location, "\(what) must be a string, not \(node.kindName)")
            return nil
        }
        return s.text
    }

    package mutating func bool(_ node: ConfigNode, what: String) -> Bool? {
        guard case .scalar(let s) = node, let b = s.bool else {
            error(node.location, "\(what) must be true or false, not \(node.kindName)\(quotedText(node))")
            return nil
        }
        return b
    }

    /// A whole number, within `range` when one is given: a number past Int64
    /// is reported as out of the range, not as "not a number".
    package mutating func int(_ node: ConfigNode, what: String, in range: ClosedRange<Int64>? = nil, unit: String = "") -> Int64? {
        guard case .scalar(let s) = node, !s.quoted else {
            error(node.location, "\(what) must be a whole number, not \(node.kindName)\(quotedText(node))")
            return nil
        }
        let digits = s.text.replacingUnderscores().drop { $0 == "-" || $0 == "+" }
        let tooLong = s.int == nil && !digits.isEmpty && digits.allSatisfy { ("0"..."9").contains($0) }
        guard let i = s.int, range.map({ $0.contains(i) }) ?? true else {
            if let range, tooLong || s.int != nil {
                error(node.location, "\(what) must be between \(range.lowerBound) and \(range.upperBound)\(unit), not \(s.text)")
            } else if tooLong {
                error(node.location, "\(what) is too large: \(s.text) does not fit in 64 bits")
            } else {
                error(node.location, "\(what) must be a whole number, not \(node.kindName)\(quotedText(node))")
            }
            return nil
        }
        return i
    }

    /// A duration of at least `atLeast` (when given) and at most `ManifestLimits.maxDuration`.
    package mutating func duration(_ node: ConfigNode, what: String, atLeast minimum: Int64? = nil) -> Int64? {
        guard case .scalar(let s) = node, let ns = Units.parseDuration(s.text) else {
            if let s = node.scalar, Units.parseDuration(s.text.numbersAsOne) != nil {
                error(node.location, "\(what) is \(s.text), longer than the limit of \(ManifestLimits.maxDurationText)")
            } else {
                error(node.location, "\(what) is not a duration: \(node.kindName)\(quotedText(node))",
                      hint: "write a number and a unit: 250ms, 5s, 1m, 1h30m (units: ns, us, ms, s, m, h, d)")
            }
            return nil
        }
        if ns > ManifestLimits.maxDuration {
            error(node.location, "\(what) is \(s.text), longer than the limit of \(ManifestLimits.maxDurationText)")
            return nil
        }
        if let minimum, ns < minimum {
            error(node.location, "\(what) must be at least \(Units.formatDuration(minimum))")
            return nil
        }
        return ns
    }

    /// A size of at most `atMost` (`ManifestLimits.maxSize` unless given).
    package mutating func size(_ node: ConfigNode, what: String, atMost maximum: Int64 = ManifestLimits.maxSize,
                       limitText: String = ManifestLimits.maxSizeText) -> Int64? {
        guard case .scalar(let s) = node, let bytes = Units.parseSize(s.text) else {
            if let s = node.scalar, Units.parseSize(s.text.numbersAsOne) != nil {
                error(node.location, "\(what) is \(s.text), larger than the limit of \(limitText)")
            } else {
                error(node.location, "\(what) is not a size: \(node.kindName)\(quotedText(node))",
                      hint: "write bytes or a number and a unit: 4096, 512KiB, 64MiB, 1GB")
            }
            return nil
        }
        if bytes > maximum {
            error(node.location, "\(what) is \(s.text), larger than the limit of \(limitText)")
            return nil
        }
        return bytes
    }

    package mutating func address(_ node: ConfigNode, what: String) -> SocketAddress? {
        guard let text = string(node, what: what) else { return nil }
        do {
            return try SocketAddress.parse(text)
        } catch {
            self.error(node.location, "\(what) is not a socket address: '\(text)': \(error)")
            return nil
        }
    }

    package mutating func choice(_ node: ConfigNode, what: String, from choices: [String]) -> String? {
        guard case .scalar(let s) = node, choices.contains(s.text) else {
            let found = node.scalar.map { "'\($0.text)'" } ?? node.kindName
            error(node.location, "\(what) must be one of \(choices.joined(separator: ", ")), not \(found)",
                  hint: node.scalar.flatMap { Suggest.hint(for: $0.text, in: choices) })
            return nil
        }
        return s.text
    }

    /// One of an enum's raw values.
    package mutating func choice<Choice: RawRepresentable & CaseIterable>(_ node: ConfigNode, what: String, of _: Choice.Type) -> Choice?
    where Choice.RawValue == String {
        choice(node, what: what, from: Choice.allCases.map(\.rawValue)).flatMap(Choice.init(rawValue:))
    }

    /// A percentage with its sign (`25%`, `12.5%`) within `range`. A bare
    /// number is refused: whether `2` means 2% or two of something is the
    /// reader's guess.
    package mutating func percent(_ node: ConfigNode, what: String, in range: ClosedRange<Double>, hint: String) -> Double? {
        guard case .scalar(let s) = node, let value = Units.parsePercent(s.text) else {
            error(node.location, "\(what) is not a percentage: \(node.kindName)\(quotedText(node))", hint: hint)
            return nil
        }
        guard range.contains(value) else {
            error(node.location, "\(what) must be between \(Units.formatPercent(range.lowerBound)) and \(Units.formatPercent(range.upperBound)), not \(s.text)")
            return nil
        }
        return value
    }

    /// A severity by name, also accepting the aliases `Severity(name:)` knows
    /// ('warn', 'crit'); errors list the canonical names.
    package mutating func severity(_ node: ConfigNode, what: String) -> Severity? {
        if let text = node.scalar?.text, let severity = Severity(name: text) { return severity }
        return choice(node, what: what, from: Severity.names).flatMap(Severity.init(name:))
    }

    /// A list of strings; a single string counts as a list of one.
    package mutating func stringList(_ node: ConfigNode, what: String) -> [String] {
        locatedStrings(node, what: what).map(\.0)
    }

    package mutating func locatedStrings(_ node: ConfigNode, what: String = "") -> [(String, SourceLocation)] {
        switch node {
        case .scalar(let s) where !s.isNull: return [(s.text, s.location)]
        case .sequence(let items, _):
            return items.compactMap { item in
                guard case .scalar(let s) = item, !s.isNull else {
                    if !what.isEmpty { error(item.location, "\(what) must list strings, not \(item.kindName)") }
                    return nil
                }
                return (s.text, s.location)
            }
        default:
            if !what.isEmpty { error(node.location, "\(what) must be a list of strings, not \(node.kindName)") }
            return []
        }
    }

    private func quotedText(_ node: ConfigNode) -> String {
        node.scalar.map { " '\($0.text)'" } ?? ""
    }
}

extension String {
    /// Every run of digits as one `1`: `99999999999d` → `1d`. Tells a value
    /// that is well-formed but too large from one that is malformed.
    var numbersAsOne: String {
        var out = ""
        var inNumber = false
        for c in self {
            let digit = ("0"..."9").contains(c)
            if !digit { out.append(c) } else if !inNumber { out.append("1") }
            inNumber = digit
        }
        return out
    }
}
