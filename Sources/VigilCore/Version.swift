/// The version of the host, reported by `vigil --version`, in `started`
/// and in the user agent of what the sinks send.
public let vigilVersion = "0.3.0"
