import Foundation
import Testing

/// `/v1/openapi.json` describes what the server answers: every path it
/// names is served (not 404), and every route of ControlAPI is in it.
@Suite(.serialized, .startsProcesses, .offThePool) struct OpenAPITests {
    @Test func theDescriptionIsServedAndNamesEveryRouteTheServerHas() throws {
        let host = try ControlRunTests.Host("  beat: { plugin: heartbeat, interval: 1h, isolation: none }",
                                           sink: "history: { type: history }")
        defer { _ = host.stop() }
        let reply = try TestEnv.unixHTTP(socket: host.socket, "GET", "/v1/openapi.json")
        #expect(reply.status == 200)
        let document = try #require(try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any])
        #expect(document["openapi"] as? String == "3.0.3")
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        #expect(Set(paths.keys) == ["/v1/health", "/v1/status", "/v1/monitors/{name}/{action}", "/v1/reload", "/v1/series",
                                    "/v1/query", "/v1/events", "/v1/openapi.json", "/metrics", "/v1/session", "/v1/stream",
                                    "/v1/conditions", "/v1/manifest", "/v1/sparklines"])
        // Each described path and method is served: an answer other than 404 and 405.
        for (path, methods) in paths {
            for method in methods.keys {
                let target = path.replacingOccurrences(of: "{name}", with: "beat").replacingOccurrences(of: "{action}", with: "poll")
                    + (path == "/v1/query" ? "?series=0.0" : "")
                if path == "/v1/reload" { continue }  // answered by ControlRunTests; here it would reload
                if path == "/v1/stream" { continue }  // answered until the client goes: ConsoleRunTests
                let answer = try TestEnv.unixHTTP(socket: host.socket, method.uppercased(), target)
                #expect(answer.status != 404 && answer.status != 405, "\(method) \(target): \(answer.status) \(answer.body)")
            }
        }
        // Every $ref lands on a component.
        let text = reply.body
        let refs = text.components(separatedBy: "\"$ref\": \"#/components/").dropFirst().map { $0.prefix { $0 != "\"" } }
        let components = document["components"] as? [String: [String: Any]] ?? [:]
        for ref in refs {
            let parts = ref.split(separator: "/").map(String.init)
            #expect(parts.count == 2 && components[parts[0]]?[parts[1]] != nil, "\(ref)")
        }
        #expect(!refs.isEmpty)
    }
}
