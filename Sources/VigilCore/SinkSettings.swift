/// One `type:` of sink, as the manifest knows it: the keys it takes beyond
/// the common ones (`type`, `match`, `min_severity`, `queue_size`,
/// `overflow`, `buffer`), how its settings are read, and what the loader
/// checks across sinks. The loader knows no sink type by name: it reads
/// the common keys, finds the type in the `SinkTypes` it was given, and
/// lets the type read the rest with the shared binder (`Keys`, `Diags`),
/// so every problem is reported at FILE:LINE:COLUMN with did-you-mean.
///
/// The runtime's half (building the sink, checks that look at the machine)
/// is `SinkType` in the host; a sink type is one type that conforms to
/// both, in one file.
package protocol SinkSettings: Sendable {
    /// The `type:` it is written with.
    static var type: String { get }
    /// Its own keys; an unknown key is an error with a suggestion from these.
    static var keys: [String] { get }
    /// The settings, or nil after reporting why in `d`.
    static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> Self?

    /// Why a `buffer: { type: disk }` cannot stand in front of this sink;
    /// nil when it can (it has a peer that takes events later and says
    /// which it took).
    var diskBufferRefusal: String? { get }
    /// The disk buffer in front of it, once the loader has read one.
    var diskBuffer: SinkBufferConfig? { get set }
    /// What no other sink may use at the same time, as an error shows it
    /// ("file /var/log/x.jsonl", "listen address tcp://127.0.0.1:9798").
    var exclusiveResources: [String] { get }
}

extension SinkSettings {
    package var diskBufferRefusal: String? {
        "a disk buffer is for sinks that connect over a stream and for output plugins; a \(Self.type) sink has no peer that can take events later"
    }
    package var diskBuffer: SinkBufferConfig? {
        get { nil }
        set {}  // never set: diskBufferRefusal refused it
    }
    package var exclusiveResources: [String] { [] }
}

/// Settings of a sink type that may have a disk buffer in front, kept in
/// its `buffer`.
package protocol DiskBufferable: SinkSettings {
    var buffer: SinkBufferConfig? { get set }
}

extension DiskBufferable {
    package var diskBuffer: SinkBufferConfig? {
        get { buffer }
        set { buffer = newValue }
    }
}

/// What a sink type's `read` is given: the sink's name, where its name is
/// written, its keys (the common ones already read), and the loader, for
/// the readers every part of the manifest shares (backoff, limits, user).
package struct SinkDeclaration {
    package var name: String
    package var location: SourceLocation
    package var keys: Keys
    package var loader: ManifestLoader

    /// "sink 'NAME'", as messages name it.
    package var described: String { "sink '\(name)'" }
}

/// The sink types a manifest may use, by `type:` name. The host gives the
/// loader its standard set (`SinkTypes.standard` in the host); a test may
/// give a set of its own.
package struct SinkTypes: Sendable {
    package let types: [any SinkSettings.Type]

    package init(_ types: [any SinkSettings.Type]) {
        var seen: [String] = []
        for type in types {
            precondition(!seen.contains(type.type), "two sink types named '\(type.type)'")
            seen.append(type.type)
        }
        self.types = types
    }

    package func named(_ name: String) -> (any SinkSettings.Type)? {
        types.first { $0.type == name }
    }

    package var names: [String] { types.map { $0.type }.sorted() }
}
