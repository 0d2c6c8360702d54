import Testing
@testable import VigilCore
@testable import VigilSinks

/// The `remote_write` sink's keys: Prometheus' defaults, every value read,
/// and every wrong one an error at its line and column.
@Suite("Manifest: remote_write") struct RemoteWriteManifestTests {
    @Test func theDefaultsArePrometheusOwn() throws {
        let (m, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: remote_write, url: "http://127.0.0.1:8428/api/v1/write" }
            """)
        #expect(d.isEmpty, "\(d)")
        let a = try #require(m?.sinks.first?.settings as? RemoteWriteSinkConfig)
        #expect(a.endpoint == HTTPPosting.Endpoint(host: "127.0.0.1", port: 8428, path: "/api/v1/write"))
        #expect(a.capacity == 10_000 && a.minShards == 1 && a.maxShards == 50 && a.maxSamplesPerSend == 2_000)
        #expect(a.batchSendDeadline == 5_000_000_000 && a.minBackoff == 30_000_000 && a.maxBackoff == 5_000_000_000)
        #expect(a.timeout == 30_000_000_000 && a.metadataInterval == 60_000_000_000 && a.staleOnExit)
        #expect(a.externalLabels.isEmpty && a.headers.isEmpty && a.credentials == nil && a.buffer == nil && a.maxSeries == 100_000)
    }

    @Test func everyKeyIsRead() throws {
        let (m, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a:
                type: remote_write
                url: http://mimir.internal/api/v1/push
                external_labels: { region: eu-west, fleet: web }
                expire_after: 2m
                max_series: 5000
                queue: { capacity: 20000, min_shards: 2, max_shards: 8, max_samples_per_send: 500, batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 10s }
                timeout: 5s
                headers: { X-Scope-OrgID: tenant-1 }
                basic_auth: { username: vigil, password_file: /etc/vigil/password }
                metadata: { send: false }
                stale_on_exit: false
                buffer: { type: disk, path: /var/lib/vigil/rw }
              b: { type: remote_write, url: "http://[::1]:9090/api/v1/write", bearer_token_file: /run/token, metadata: { interval: 5m } }
            """)
        #expect(d.isEmpty, "\(d)")
        let a = try #require(m?.sinks.first?.settings as? RemoteWriteSinkConfig)
        let b = try #require(m?.sinks.last?.settings as? RemoteWriteSinkConfig)
        #expect(a.endpoint == HTTPPosting.Endpoint(host: "mimir.internal", port: 80, path: "/api/v1/push"))
        #expect(a.externalLabels.map(\.0) == ["region", "fleet"] && a.externalLabels.map(\.1) == ["eu-west", "web"])
        #expect(a.expireAfter == 120_000_000_000 && a.maxSeries == 5_000)
        #expect(a.capacity == 20_000 && a.minShards == 2 && a.maxShards == 8 && a.maxSamplesPerSend == 500)
        #expect(a.batchSendDeadline == 1_000_000_000 && a.minBackoff == 100_000_000 && a.maxBackoff == 10_000_000_000)
        #expect(a.timeout == 5_000_000_000 && a.metadataInterval == 0 && !a.staleOnExit)
        #expect(a.headers.map(\.0) == ["X-Scope-OrgID"])
        #expect(a.credentials == HTTPCredentials(.basic(username: "vigil", password: nil, passwordFile: "/etc/vigil/password")))
        #expect(a.buffer?.path == "/var/lib/vigil/rw")
        #expect(b.endpoint.host == "::1" && b.endpoint.port == 9090)
        #expect(b.credentials == HTTPCredentials(.bearerFile("/run/token")) && b.metadataInterval == 300_000_000_000)
    }

    @Test func wrongValuesAreRefusedWhereTheyAre() {
        let (_, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: remote_write }
              b: { type: remote_write, url: "https://x/api/v1/write" }
              c: { type: remote_write, url: "http://x:0/w", external_labels: { __x: a, 9b: c, ok: "" } }
              d: { type: remote_write, url: "http://x/w", queue: { min_shards: 9, max_shards: 4, max_samples_per_send: 20000, capacity: 1000, shards: 3 } }
              e: { type: remote_write, url: "http://x/w", queue: { min_backoff: 2s, max_backoff: 1s }, timeout: 1ms }
              f: { type: remote_write, url: "http://x/w", headers: { Content-Type: x, X-Prometheus-Remote-Write-Version: "2" } }
              g: { type: remote_write, url: "http://x/w", basic_auth: { password: p }, bearer_token_file: /t }
              h: { type: remote_write, url: "http://x/w", basic_auth: { username: "a:b", password: p } }
              i: { type: remote_write, url: "http://x/w", bearer_token_file: /t, headers: { Authorization: "Bearer x" } }
              j: { type: remote_write, url: "http://user:pw@x/w" }
            """)
        expectDiagnostic(d, at: 3, 3, "remote_write sink 'a' needs 'url'")
        expectDiagnostic(d, at: 4, 33, "https is not supported by this build")
        expectDiagnostic(d, at: 5, 33, "the endpoint's port is not 1-65535")
        expectDiagnostic(d, at: 6, 68, "'queue.min_shards' (9) is more than 'queue.max_shards' (4)")
        expectDiagnostic(d, at: 6, 108, "'queue.max_samples_per_send' (20000) is more than 'queue.capacity' (1000)")
        expectDiagnostic(d, at: 6, 131, "unknown key 'shards' in 'queue' of sink 'd'")
        expectDiagnostic(d, at: 7, 86, "'queue.max_backoff' is shorter than 'queue.min_backoff' (2s)")
        expectDiagnostic(d, at: 7, 101, "'timeout' must be at least 100ms")
        expectDiagnostic(d, at: 8, 58, "header 'Content-Type' is the sink's own to set")
        expectDiagnostic(d, at: 8, 75, "header 'X-Prometheus-Remote-Write-Version' is the sink's own to set")
        expectDiagnostic(d, at: 9, 59, "'basic_auth' needs 'username'")
        expectDiagnostic(d, at: 9, 95, "'bearer_token_file' and 'basic_auth' both set the Authorization header")
        expectDiagnostic(d, at: 10, 71, "'basic_auth.username' may not hold ':'")
        expectDiagnostic(d, at: 11, 66, "'headers' has an Authorization already")
        expectDiagnostic(d, at: 12, 33, "the endpoint has no host (credentials go in basic_auth or headers")
    }

    /// URLs a request line could not carry as they are, refused at once
    /// (they were retried forever, as if the receiver were away).
    @Test(arguments: ["http://127.0.0.1:80/pâth", "http://127.0.0.1:80/a\u{7F}b", "http://a b:80/", "http://host:80:80/w",
                      "http://host:+80/w", "http://ho\tst/w", "http://[::1/w", "http://:80/w"])
    func urlsThatCannotBeSentAreRefused(url: String) {
        let (_, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              a: { type: remote_write, url: "\(url.replacingOccurrences(of: "\t", with: "\\t").replacingOccurrences(of: "\u{7F}", with: "\\x7F"))" }
            """)
        #expect(d.contains { $0.level == .error && $0.message.contains("bad 'url'") && $0.location.line == 3 }, "\(url): \(d)")
    }

    @Test func externalLabelsMustBeLabelNamesWithValues() {
        let (_, d) = load("""
            monitors: { cpu: { plugin: cpu } }
            sinks:
              c: { type: remote_write, url: "http://x/w", external_labels: { __x: a, 9b: c, ok: "" } }
            """)
        expectDiagnostic(d, at: 3, 66, "'__x' is not a label name")
        expectDiagnostic(d, at: 3, 74, "'9b' is not a label name")
        expectDiagnostic(d, at: 3, 85, "external label 'ok' is empty")
        expectCount(d, 3)
    }
}
