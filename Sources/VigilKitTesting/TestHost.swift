import Synchronization
import VigilCore
import VigilABI
import VigilKit

/// A host for plugin tests, without the daemon: it negotiates with a plugin
/// (a Swift monitor type in this process, or a built `.so`) exactly as
/// `vigil` does, binds options as a manifest would, and runs instances whose
/// polls are driven by the test through an injected clock.
///
///     let host = try PluginTestHost(CPUMonitor.self)
///     let cpu = try host.instance(options: "{ procfs: \(fixture) }", interval: .seconds(1))
///     try cpu.start()                       // start, then the snapshot poll
///     try cpu.advance(by: .seconds(3))      // three more polls, clock +3 s
///     #expect(cpu.events(kind: "sample").count == 4)
///     #expect(cpu.violations.isEmpty)       // every event matched the declared kinds
public final class PluginTestHost: @unchecked Sendable {  // immutable; the clock is atomic
    /// The plugin's self-description, as `vigil plugins describe` reads it.
    public let description: PluginDescription
    /// The clock every instance of this host reads (`context.now()`) and
    /// stamps events with. Starts at 2026-01-01T00:00:00Z.
    public let clock: ManualClock
    let plugin: LoadedPlugin
    /// For in-process types: makes `create` build this type.
    let creating: ((() -> vigil_status) -> vigil_status)?

    /// A Swift monitor type compiled into the test.
    public convenience init<M: PolledMonitor>(_ type: M.Type, clock: ManualClock = ManualClock()) throws(PluginTestError) {
        try self.init(name: "\(M.self)", clock: clock, entry: { a, r in VigilKit.export(M.self, a, r) },
                      creating: { body in VigilKitTestSupport.creating(M.self, body) })
    }

    /// A Swift monitor type that pushes (not polled).
    public convenience init<M: Monitor>(_ type: M.Type, clock: ManualClock = ManualClock()) throws(PluginTestError) {
        try self.init(name: "\(M.self)", clock: clock, entry: { a, r in VigilKit.export(M.self, a, r) },
                      creating: { body in VigilKitTestSupport.creating(M.self, body) })
    }

    /// A Swift output type compiled into the test; its instances are made
    /// with `output(_:options:)`.
    public convenience init<O: Output>(_ type: O.Type, clock: ManualClock = ManualClock()) throws(PluginTestError) {
        try self.init(name: "\(O.self)", clock: clock, entry: { a, r in VigilKit.export(O.self, a, r) },
                      creating: { body in VigilKitTestSupport.creating(O.self, body) })
    }

    private init(name: String, clock: ManualClock,
                 entry: (UnsafePointer<vigil_entry_args>, UnsafeMutablePointer<vigil_entry_result>) -> vigil_status,
                 creating: @escaping (() -> vigil_status) -> vigil_status) throws(PluginTestError) {
        switch PluginLoader.negotiate(path: "in-process \(name)", entry: entry) {
        case .failure(let refusal): throw PluginTestError(refusal.description)
        case .success(let loaded):
            plugin = loaded
            description = loaded.description
        }
        self.clock = clock
        self.creating = creating
    }

    /// A plugin file, loaded as the host loads it (dlopen, negotiation, validation).
    public init(path: String, clock: ManualClock = ManualClock()) throws(PluginTestError) {
        switch PluginCatalog(directories: []).load(path: path) {
        case .failure(let refusal): throw PluginTestError(refusal.description)
        case .success(let loaded):
            plugin = loaded
            description = loaded.description
        }
        self.clock = clock
        self.creating = nil
    }

    /// Creates an instance. `options` is a YAML flow mapping, as in a
    /// manifest's `options:` (`"{ procfs: /tmp/fixture, per_cpu: true }"`);
    /// it is checked against the self-description first, and every problem
    /// is reported as the manifest would report it.
    public func instance(_ name: String = "test", options: String = "{}",
                         interval: Duration? = nil) throws(PluginTestError) -> TestInstance {
        guard description.kind == .monitor else {
            throw PluginTestError("\(description.name) is an output plugin: make its instances with output(_:options:)")
        }
        let intervalText = interval.map { "\($0.components.seconds * 1_000_000_000 + $0.components.attoseconds / 1_000_000_000)ns" }
        let (config, bound) = try bind(name, options: options, interval: intervalText, owner: "monitor '\(name)'")
        return try TestInstance(host: self, name: name, options: bound,
                                interval: description.effectiveInterval(config.interval))
    }
}

extension PluginTestHost {
    /// Creates an instance of an output plugin, as a sink of `type: plugin`
    /// named `name` would have it. `options` is a YAML flow mapping as in
    /// the sink's `options:`, checked against the self-description first;
    /// `hostName` is the host name its batches carry.
    public func output(_ name: String = "test", options: String = "{}",
                       hostName: String = "test-host") throws(PluginTestError) -> TestOutput {
        guard description.kind == .output else {
            throw PluginTestError("\(description.name) is a monitor plugin: make its instances with instance(_:options:interval:)")
        }
        // Options are written and bound as a monitor's: the same binder serves sinks.
        let (_, bound) = try bind(name, options: options, interval: nil, owner: "sink '\(name)'")
        return try TestOutput(host: self, name: name, hostName: hostName, options: bound)
    }
}

extension PluginTestHost {
    /// `options`, a YAML flow mapping, written as the options of a monitor
    /// `name` of this plugin (with `interval`, as a manifest writes it, when
    /// given), read as the manifest is and bound to the self-description for
    /// `owner` ("monitor 'cpu'"); what is wrong, thrown as the manifest
    /// would report it.
    private func bind(_ name: String, options: String, interval: String?,
                      owner: String) throws(PluginTestError) -> (MonitorConfig, [BoundOption]) {
        let text = """
        monitors:
          \(name):
            plugin: \(description.name)
        \(interval.map { "    interval: \($0)\n" } ?? "")    options: \(options)
        sinks:
          none: { type: null }
        """
        let (manifest, diagnostics) = ManifestLoader(file: "options", sinkTypes: SinkTypes([])).load(text)
        guard let manifest, let config = manifest.monitors.first else {
            throw PluginTestError("options: " + diagnostics.map(\.description).joined(separator: "; "))
        }
        let (bound, problems) = OptionBinder.bind(config.options, at: config.optionsLocation, of: owner, to: description)
        guard problems.isEmpty else {
            throw PluginTestError("options: " + problems.map(\.description).joined(separator: "; "))
        }
        return (config, bound)
    }

    /// Calls the descriptor's `create` for an instance `name`, as the host
    /// does (through `creating` for an in-process type), and returns the
    /// instance; `context`, the instance's host context, is retired when it fails.
    func create(_ name: String, options: [BoundOption], interval: Int64,
                context: HostContext) throws(PluginTestError) -> UnsafeMutableRawPointer {
        var out: UnsafeMutableRawPointer?
        let descriptor = plugin.descriptor
        let (status, message) = withCreateArgs(name: name, options: options, interval: interval, host: context.pointer,
                                               api: HostTable.shared) { args in
            withPluginError { err in
                withoutActuallyEscaping({ descriptor.create(&args, &out, err) }) { create in
                    creating.map { $0(create) } ?? create()
                }
            }
        }
        guard status == VIGIL_OK, let out else {
            context.retire()
            throw status == VIGIL_OK ? PluginTestError("create returned OK but no instance")
                                     : TestInstance.failure("create", status, message)
        }
        return out
    }
}

/// Why a test host could not do what it was asked.
public struct PluginTestError: Error, CustomStringConvertible, Sendable {
    public var description: String
    /// The plugin's status name when a call failed ("invalid config", "unavailable"…).
    public var status: String?
    public init(_ description: String, status: String? = nil) {
        self.description = description
        self.status = status
    }
}

/// A clock the test moves by hand; nanoseconds since the epoch.
public final class ManualClock: Sendable {
    private let value: Atomic<Int64>

    /// 2026-01-01T00:00:00Z unless told otherwise.
    public init(nanoseconds: Int64 = 1_767_225_600_000_000_000) { value = Atomic(nanoseconds) }

    public var now: Int64 { value.load(ordering: .acquiring) }

    public func advance(by duration: Duration) {
        let (s, atto) = duration.components
        value.add(s * 1_000_000_000 + atto / 1_000_000_000, ordering: .acquiringAndReleasing)
    }
}

/// One event as the plugin emitted it.
public struct TestEvent: Sendable, CustomStringConvertible {
    public var kind: String
    public var severity: VigilCore.Severity
    /// Nanoseconds since the epoch: the plugin's time, or the clock's when it gave none.
    public var time: Int64
    public var fields: [Field]

    public subscript(field name: String) -> FieldValue? { fields.first { $0.name == name }?.value }
    public func double(_ name: String) -> Double? { if case .double(let v)? = self[field: name] { v } else { nil } }
    public func int(_ name: String) -> Int64? { if case .int(let v)? = self[field: name] { v } else { nil } }
    public func bool(_ name: String) -> Bool? { if case .bool(let v)? = self[field: name] { v } else { nil } }
    public func string(_ name: String) -> String? { if case .string(let v)? = self[field: name] { v } else { nil } }

    public var description: String {
        "\(kind)[\(severity)] " + fields.map { "\($0.name)=\($0.value)" }.joined(separator: " ")
    }
}
