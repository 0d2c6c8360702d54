import Testing
@testable import VigilCore
@testable import VigilSinks

/// The `prometheus` and `syslog` sinks' keys: defaults, and every wrong
/// value an error at its line and column.
@Suite("Manifest: fleet sinks") struct FleetSinkManifestTests {
    @Test func prometheusDefaultsAndValues() throws {
        let (m, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: prometheus }
              b: { type: prometheus, listen: "tcp://0.0.0.0:9100", expire_after: 2m, max_series: 500 }
            """)
        #expect(d.isEmpty, "\(d)")
        guard let a = m?.sinks.first?.settings as? PrometheusSinkConfig, let b = m?.sinks.last?.settings as? PrometheusSinkConfig else {
            Issue.record("not prometheus sinks")
            return
        }
        #expect(a.listenHost == "127.0.0.1" && a.listenPort == 9798 && a.expireAfter == nil && a.maxSeries == 100_000)
        #expect(b.listenHost == "0.0.0.0" && b.listenPort == 9100 && b.expireAfter == 120_000_000_000 && b.maxSeries == 500)
    }

    @Test func prometheusRefusals() {
        let (_, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: prometheus, listen: "unix:/run/x.sock" }
              b: { type: prometheus, listen: "tcp://127.0.0.1:1", expire_after: 10ms, max_series: 0 }
              c: { type: prometheus, listen: "tcp://127.0.0.1:9798" }
              e: { type: socket, listen: "tcp://127.0.0.1:9798" }
            """)
        expectDiagnostic(d, at: 3, 34, "a prometheus sink listens on tcp://HOST:PORT")
        expectDiagnostic(d, at: 4, 69, "'expire_after' must be at least 1s")
        expectDiagnostic(d, at: 4, 87, "'max_series'")
        expectDiagnostic(d, at: 6, 3, "sinks 'c' and 'e' both use listen address tcp://127.0.0.1:9798")
        expectCount(d, 4)
    }

    @Test func syslogDefaultsAndValues() throws {
        let (m, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: syslog, connect: "unix:/dev/log" }
              b: { type: syslog, connect: "udp://127.0.0.1:514", facility: local7, app_name: web-agent }
              c: { type: syslog, connect: "tcp://logs:601", max_message_size: 64KiB, reconnect_max: 5s }
            """)
        #expect(d.isEmpty, "\(d)")
        let configs = (m?.sinks ?? []).compactMap { sink -> SyslogSinkConfig? in
            sink.settings as? SyslogSinkConfig
        }
        #expect(configs.count == 3)
        #expect(configs[0].facility == .daemon && configs[0].appName == "vigil" && configs[0].effectiveMaxMessageSize == 8192)
        #expect(configs[1].facility == .local7 && configs[1].appName == "web-agent" && configs[1].effectiveMaxMessageSize == 2048)
        #expect(configs[2].effectiveMaxMessageSize == 65536 && configs[2].reconnectMax == 5_000_000_000)
    }

    @Test func syslogRefusals() {
        let (_, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: syslog }
              b: { type: syslog, connect: "udp://h:514", facility: local9, app_name: "two words" }
              c: { type: syslog, connect: "udp://h:514", max_message_size: 100KiB }
              e: { type: syslog, connect: "tcp://h:601", max_message_size: 100 }
              f: { type: syslog, connect: "ftp://h:601" }
            """)
        expectDiagnostic(d, at: 3, 3, "syslog sink 'a' needs 'connect'")
        expectDiagnostic(d, at: 4, 56, "'facility' must be one of kern, user")
        expectDiagnostic(d, at: 4, 74, "'app_name' must be 1 to 48 printable ASCII characters")
        expectDiagnostic(d, at: 5, 64, "'max_message_size' over UDP is at most 65507 bytes")
        expectDiagnostic(d, at: 6, 64, "'max_message_size' must be at least 480 bytes")
        expectDiagnostic(d, at: 7, 31, "unknown scheme 'ftp'")
        expectCount(d, 6)
    }

    @Test func retryNamesAndTheirOlderSpelling() {
        let (m, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: socket, connect: "tcp://h:1", retry_min: 1s, retry_max: 1m }
              b: { type: syslog, connect: "tcp://h:601", reconnect_min: 2s }
              c: { type: socket, connect: "tcp://h:1", retry_min: 1s, reconnect_min: 2s }
            """)
        expectDiagnostic(d, at: 5, 74, "'reconnect_min' is the older name of 'retry_min' (line 5); give one")
        expectCount(d, 1)
        if let a = m?.sinks[0].settings as? SocketSinkConfig { #expect(a.reconnectMin == 1_000_000_000 && a.reconnectMax == 60_000_000_000) }
        if let b = m?.sinks[1].settings as? SyslogSinkConfig { #expect(b.reconnectMin == 2_000_000_000) }
    }

    @Test func otlpDefaultsAndValues() throws {
        let (m, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: otlp, endpoint: "http://collector" }
              b: { type: otlp, endpoint: "http://[::1]:4319/base/", signals: [metrics, logs], encoding: json, compression: none,
                   headers: { Authorization: "Bearer x", X-Scope-OrgID: tenant }, batch: { events: 10, bytes: 64KiB, timeout: 2s },
                   retry_min: 1s, retry_max: 2m, timeout: 3s }
            """)
        #expect(d.isEmpty, "\(d)")
        let configs = (m?.sinks ?? []).compactMap { sink -> OTLPSinkConfig? in
            sink.settings as? OTLPSinkConfig
        }
        #expect(configs.count == 2)
        #expect(configs[0].host == "collector" && configs[0].port == 4318 && configs[0].basePath == "")
        #expect(configs[0].signals == [.logs] && configs[0].encoding == .protobuf && configs[0].compression == .gzip)
        #expect(configs[1].host == "::1" && configs[1].port == 4319 && configs[1].basePath == "/base")
        #expect(configs[1].signals == [.metrics, .logs] && configs[1].encoding == .json && configs[1].compression == .none)
        #expect(configs[1].headers.map(\.0) == ["Authorization", "X-Scope-OrgID"])
        #expect(configs[1].batchEvents == 10 && configs[1].batchBytes == 65536 && configs[1].batchTimeout == 2_000_000_000)
        #expect(configs[1].retryMin == 1_000_000_000 && configs[1].retryMax == 120_000_000_000 && configs[1].timeout == 3_000_000_000)
    }

    @Test func otlpRefusals() {
        let (_, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: otlp }
              b: { type: otlp, endpoint: "https://collector:4318" }
              c: { type: otlp, endpoint: "http://collector:99999" }
              e: { type: otlp, endpoint: "http://h", signals: [traces], headers: { "bad name": x, Ok: "a\\nb" } }
              f: { type: otlp, endpoint: "http://h", encoding: xml, batch: { events: 0, bytes: 10 } }
            """)
        expectDiagnostic(d, at: 3, 3, "otlp sink 'a' needs 'endpoint'")
        expectDiagnostic(d, at: 4, 30, "https is not supported by this build (no TLS library)")
        expectDiagnostic(d, at: 5, 30, "the endpoint's port is not 1-65535")
        expectDiagnostic(d, at: 6, 52, "'signals' lists logs and metrics, not 'traces'")
        expectDiagnostic(d, at: 6, 72, "'bad name' is not an HTTP header name")
        expectDiagnostic(d, at: 6, 91, "header 'Ok' must be printable ASCII")
        expectDiagnostic(d, at: 7, 52, "'encoding'")
        expectDiagnostic(d, at: 7, 74, "'batch.events'")
        expectDiagnostic(d, at: 7, 84, "'batch.bytes' must be at least 1KiB")
    }

    @Test func buffers() throws {
        let (m, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: otlp, endpoint: "http://h", buffer: { type: memory, when_full: drop_newest } }
              b: { type: socket, connect: "tcp://h:1", buffer: { type: disk, path: /var/lib/vigil/b, max_size: 2GiB, fsync: always } }
              c: { type: socket, listen: "tcp://127.0.0.1:7000", buffer: { type: disk, path: /x } }
              e: { type: syslog, connect: "tcp://h:601", buffer: { type: disk } }
              f: { type: otlp, endpoint: "http://h", buffer: { type: disk, path: /var/lib/vigil/b, max_size: 10KiB } }
            """)
        #expect(m?.sinks.first?.overflow == .dropNewest)
        if let b = m?.sinks[1].settings as? SocketSinkConfig {
            #expect(b.buffer?.path == "/var/lib/vigil/b" && b.buffer?.maxSize == 2 << 30 && b.buffer?.fsync == .always)
        } else {
            Issue.record("b is not a socket sink")
        }
        expectDiagnostic(d, at: 5, 70, "a disk buffer is for sinks that connect over a stream")
        expectDiagnostic(d, at: 6, 54, "a disk buffer needs a 'path'")
        expectDiagnostic(d, at: 7, 98, "'buffer.max_size' must be at least 1MiB")
        expectDiagnostic(d, at: 7, 70, "sinks 'b' and 'f' both use the disk buffer directory /var/lib/vigil/b")
        expectCount(d, 4)
        // The same place spelled otherwise, or one inside the other.
        let (_, e) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: otlp, endpoint: "http://h", buffer: { type: disk, path: buf } }
              b: { type: otlp, endpoint: "http://h", buffer: { type: disk, path: ./x/../buf/ } }
              c: { type: otlp, endpoint: "http://h", buffer: { type: disk, path: buf/inner } }
              f: { type: otlp, endpoint: "http://h", buffer: { type: disk, path: bufs } }
            """)
        expectDiagnostic(e, at: 4, 70, "sinks 'a' and 'b' both use the disk buffer directory buf")
        expectDiagnostic(e, at: 5, 70, "sinks 'a' and 'c' both use the disk buffer directory buf and buf/inner, one inside the other")
        expectCount(e, 2)
    }

    @Test func headersTheSinkSetsItselfAreRefused() {
        let (_, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: otlp, endpoint: "http://h", headers: { Content-Length: "5", host: other, X-Ok: "é" } }
            """)
        expectDiagnostic(d, at: 3, 53, "header 'Content-Length' is the sink's own to set")
        expectDiagnostic(d, at: 3, 74, "header 'host' is the sink's own to set")
        expectDiagnostic(d, at: 3, 93, "header 'X-Ok' must be printable ASCII")
        expectCount(d, 3)
    }
}
