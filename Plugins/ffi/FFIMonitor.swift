@preconcurrency import CVigilPlugin
import VigilKit

/// Calls a function of a shared library, with a signature declared in the
/// manifest, at each interval, and emits what it returned (see README.md).
/// The options are read in Signature.swift, the library is opened in
/// SharedLibrary.swift, the call is made in ForeignCall.swift (through
/// libffi; a build without it has WithoutLibffi.swift instead).
final class FFIMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "ffi", version: "1.0.0",
        summary: "Calls a C function of any shared library, declared in the manifest, and emits its results",
        defaultInterval: .seconds(10),
        options: [
            // The examples, which `plugins check` uses, call getpid(2) of the C library.
            OptionDecl("library", .string, required: true, example: "libc.so.6", doc: "The shared library: a file name dlopen finds (libm.so.6) or a path."),
            OptionDecl("symbol", .string, required: true, example: "getpid", doc: "The function's name in the library."),
            OptionDecl("args", .json, default: "[]", doc: "The arguments, in order: {TYPE: VALUE} or {out: \"TYPE[COUNT]\"}."),
            OptionDecl("returns", .string, default: "void", example: "int32", doc: "The return type: void, bool, int8…uint64, float, double or string."),
            OptionDecl("fields", .json, default: "[]", example: "[pid]",
                       doc: "Field names: the return value (unless void), then each element of each out-argument."),
        ],
        events: [
            EventDecl("result", doc: "One call: the fields named by the `fields` option, and the call's duration.",
                      fields: [FieldDecl(Signature.reservedField, .double, unit: "microseconds", doc: "how long the call took")],
                      dynamicFields: true),
        ])

    private let context: MonitorContext
    private let names: [String]
    private let call: ForeignCall

    init(options: RawOptions, context: MonitorContext) throws(MonitorError) {
        self.context = context
        // The options first: a bad manifest loads no library (and runs none of its constructors).
        let signature = try Signature.parse(args: options.json("args") ?? "[]", returns: options.string("returns") ?? "void",
                                            fields: options.json("fields") ?? "[]")
        #if FFI
        let library = try SharedLibrary(options.string("library") ?? "")
        let function = try library.function(options.string("symbol") ?? "")
        names = signature.fields
        call = try ForeignCall(library: library, function: function, signature: signature)
        #else
        throw ForeignCall.refusal  // built without libffi: WithoutLibffi.swift
        #endif
    }

    func poll() throws(MonitorError) {
        let (values, elapsed) = call.invoke()
        var fields: [(String, Value)] = [(Signature.reservedField, .double(elapsed))]
        fields.reserveCapacity(names.count + 1)
        for (name, value) in zip(names, values) {
            if let value { fields.append((name, value)) }  // a NULL string: no field
        }
        context.emit("result", fields: fields)
    }
}

@_cdecl("vigil_plugin_entry")
public func vigilPluginEntry(_ args: UnsafePointer<vigil_entry_args>?,
                             _ result: UnsafeMutablePointer<vigil_entry_result>?) -> vigil_status {
    VigilKit.export(FFIMonitor.self, args, result)
}
