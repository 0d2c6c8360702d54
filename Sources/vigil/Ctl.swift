import ArgumentParser
import Foundation
import Logging
import NIOHTTP1
import VigilIsolation
import VigilRuntime
import VigilControl
import VigilCore

/// `vigil ctl`: asks a running host over its control socket.
struct Ctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ctl",
        abstract: "Ask a running vigil: its health and status; start, stop, poll or restart one monitor; reload the manifest.",
        discussion: """
        Speaks to the control socket of `vigil run` (--control; by default $VIGIL_STATE_DIR/vigil.sock, as root \
        /run/vigil/vigil.sock, else $XDG_RUNTIME_DIR/vigil/vigil.sock, or the service's /run/vigil/vigil.sock \
        where that one is not there). Tables on a terminal, the API's JSON \
        with --json.

        Exit status: 0 when the host answered yes (healthy; the action taken); 1 when it answered no (unhealthy; \
        the action refused, with its reason); 2 when it could not be reached, or refused the bearer token \
        (tcp://, from --token-file or $VIGIL_CONTROL_TOKEN).
        """,
        subcommands: [Health.self, Status.self, Start.self, Stop.self, Poll.self, Restart.self, Reload.self])

    /// `--control`, `--token-file` and `--json` are taken before the verb
    /// as well as after it (`vigil ctl --control unix:PATH status`, as
    /// systemctl and kubectl users type them): each verb declares the same
    /// group, and the parser fills it from either place.
    @OptionGroup var connection: Connection

    /// Where the host's control API is: `--control`, else the standard socket;
    /// over TCP, with the bearer token from `--token-file` or VIGIL_CONTROL_TOKEN.
    struct Endpoint: ParsableArguments {
        @Option(help: ArgumentHelp("The host's control API: unix:PATH, or tcp://HOST:PORT (vigil run --control-tcp), which needs the token.", valueName: "ADDRESS"))
        var control: String?
        @Option(name: .customLong("token-file"), help: ArgumentHelp("The bearer token for a tcp:// address: the file the host was given with --control-token-file (mode 0600). Else $VIGIL_CONTROL_TOKEN.", valueName: "FILE"))
        var tokenFile: String?

        func endpoint() throws -> ControlEndpoint {
            if let control {
                do {
                    return try ControlEndpoint(parsing: control) {
                        if let tokenFile { return try ControlToken.load(path: tokenFile).token }
                        if let text = ProcessInfo.processInfo.environment["VIGIL_CONTROL_TOKEN"] {
                            return try ControlToken(text, from: "VIGIL_CONTROL_TOKEN")
                        }
                        return nil
                    }
                } catch let error as ControlError {
                    // Not a usage error: a token that cannot be had, said as such, exit 2.
                    FileHandle.standardError.write(Data("vigil: \(error)\n".utf8))
                    throw ExitCode(2)
                }
            }
            guard let standard = ControlAddress.forClient() else {
                throw ValidationError("no standard control socket for this user: give --control unix:PATH")
            }
            return ControlEndpoint(address: standard)
        }
    }

    struct Connection: ParsableArguments {
        @OptionGroup var endpoint: Endpoint
        @Flag(help: "Print the API's JSON as it came.") var json = false

        /// The reply, or exit 2 with why the host could not be reached.
        func ask(_ method: HTTPMethod, _ path: String) async throws -> ControlClient.Reply {
            let target = try endpoint.endpoint()
            let reply: ControlClient.Reply
            do {
                reply = try await target.request(method, path)
            } catch {
                FileHandle.standardError.write(Data("vigil ctl: \(error)\n".utf8))
                throw ExitCode(2)
            }
            // Refused at the door (TCP without the right token): not an answer to the question.
            if reply.status == 401 {
                let object = (try? JSONSerialization.jsonObject(with: Data(reply.body))) as? [String: Any]
                FileHandle.standardError.write(Data("vigil ctl: \(target): \(object?["error"] as? String ?? "unauthorized") (HTTP 401)\n".utf8))
                throw ExitCode(2)
            }
            return reply
        }
    }

    struct Health: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "ok, or unhealthy with the reasons (exit 1).")
        @OptionGroup var connection: Connection

        func run() async throws {
            let reply = try await connection.ask(.GET, "/v1/health")
            if connection.json {
                print(reply.text, terminator: "")
            } else {
                let object = (try? JSONSerialization.jsonObject(with: Data(reply.body))) as? [String: Any] ?? [:]
                print(object["status"] as? String ?? reply.text)
                for reason in object["reasons"] as? [String] ?? [] { print("  \(reason)") }
            }
            if reply.status != 200 { throw ExitCode(1) }
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every monitor and sink of the host.")
        @OptionGroup var connection: Connection

        func run() async throws {
            let reply = try await connection.ask(.GET, "/v1/status")
            guard reply.status == 200 else { return try refuse(reply) }
            if connection.json {
                print(reply.text, terminator: "")
                return
            }
            let object = (try? JSONSerialization.jsonObject(with: Data(reply.body))) as? [String: Any] ?? [:]
            let uptime = object["uptime_s"] as? Double ?? 0
            // Which host answered: its pid, manifest and start, and where it was asked.
            let target = (try? connection.endpoint.endpoint()).map { "\($0)" } ?? "?"
            print("vigil \(object["version"] as? String ?? "?") (pid \(object["pid"] as? Int ?? 0)) at \(target)")
            print("  manifest \(object["manifest"] as? String ?? "?"), started \(object["started_at"] as? String ?? "?"), "
                  + "up \(TopScreen.duration(uptime)), \(object["events"] as? Int ?? 0) events")
            print()
            var rows = [["MONITOR", "STATE", "PLUGIN", "WHERE", "EVENTS", "POLLS", "ERRORS", "LAST ERROR"]]
            for m in object["monitors"] as? [[String: Any]] ?? [] {
                var state = m["state"] as? String ?? "?"
                if m["available"] as? Bool == false { state += " (unavailable)" }
                rows.append([m["name"] as? String ?? "", state, m["plugin"] as? String ?? "",
                             m["isolation"] as? String == "process" ? "runner" : "in process",
                             "\(m["events"] as? Int ?? 0)", "\(m["polls"] as? Int ?? 0)",
                             "\((m["poll_errors"] as? Int ?? 0) + (m["crashes"] as? Int ?? 0))",
                             String((m["last_error"] as? String ?? "").prefix(60))])
            }
            printTable(rows)
            print()
            // An output plugin's sink says where it runs and how often its runner ended.
            let sinks = object["sinks"] as? [[String: Any]] ?? []
            let outputs = sinks.contains { $0["isolation"] != nil }
            rows = [["SINK", "TYPE", "QUEUE", "WRITTEN", "DROPPED", "FAILED"] + (outputs ? ["WHERE", "CRASHES"] : [])]
            for s in sinks {
                var row = [s["name"] as? String ?? "", s["type"] as? String ?? "",
                           "\(s["queue_depth"] as? Int ?? 0)/\(s["queue_capacity"] as? Int ?? 0)",
                           "\(s["written"] as? Int ?? 0)", "\(s["dropped"] as? Int ?? 0)", "\(s["failed"] as? Int ?? 0)"]
                if outputs {
                    let isolation = s["isolation"] as? String
                    row += [isolation == nil ? "" : isolation == "process" ? "runner" : "in process",
                            isolation == nil ? "" : "\(s["crashes"] as? Int ?? 0)"]
                }
                rows.append(row)
            }
            printTable(rows)
            for s in sinks {
                if let why = s["failure"] as? String { print("sink \(s["name"] as? String ?? "") failed: \(why)") }
            }
            // A remote_write sink's shards and samples, as Prometheus' own remote write reports them.
            for s in sinks {
                guard let q = s["send_queue"] as? [String: Any] else { continue }
                let lost = (q["samples_lost"] as? [String: Int] ?? [:]).filter { $0.value > 0 }.sorted { $0.key < $1.key }
                print()
                print("sink \(s["name"] as? String ?? "") → \(q["url"] as? String ?? "?"): "
                      + "\(counted(q["shards"] as? Int ?? 0, "shard")) (\(q["min_shards"] as? Int ?? 0)-\(q["max_shards"] as? Int ?? 0), wanted \(String(format: "%.2f", q["desired_shards"] as? Double ?? 0))), "
                      + "\(q["pending_samples"] as? Int ?? 0) samples queued, \(q["series"] as? Int ?? 0) series, \(String(format: "%.1f", q["behind_s"] as? Double ?? 0)) s behind")
                print("  samples: \(q["samples_in"] as? Int ?? 0) made, \(q["samples_sent"] as? Int ?? 0) sent in \(q["requests"] as? Int ?? 0) requests, "
                      + "\(q["retries"] as? Int ?? 0) attempts retried (\(q["samples_retried"] as? Int ?? 0) samples), lost: "
                      + (lost.isEmpty ? "none" : lost.map { "\($0.value) \($0.key)" }.joined(separator: ", ")))
                if let error = q["last_error"] as? String { print("  failing: \(error)") }
            }
        }
    }

    struct Poll: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Poll one monitor now, outside its schedule.")
        @Argument(help: "The monitor's name in the manifest.") var monitor: String
        @OptionGroup var connection: Connection

        func run() async throws { try await act(connection, monitor, "poll") }
    }

    struct Start: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Start one stopped, failed or quarantined monitor; the others are untouched.")
        @Argument(help: "The monitor's name in the manifest.") var monitor: String
        @OptionGroup var connection: Connection

        func run() async throws { try await act(connection, monitor, "start") }
    }

    struct Stop: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop one monitor (until started again or reloaded changed); the others are untouched.")
        @Argument(help: "The monitor's name in the manifest.") var monitor: String
        @OptionGroup var connection: Connection

        func run() async throws { try await act(connection, monitor, "stop") }
    }

    struct Reload: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Read the manifest again and apply what changed; exit 1 with the errors when it is invalid (nothing changes then).")
        @OptionGroup var connection: Connection

        func run() async throws {
            let reply = try await connection.ask(.POST, "/v1/reload")
            if connection.json {
                print(reply.text, terminator: "")
                if reply.status != 200 { throw ExitCode(1) }
                return
            }
            let object = (try? JSONSerialization.jsonObject(with: Data(reply.body))) as? [String: Any] ?? [:]
            guard reply.status == 200 else {
                let errors = object["errors"] as? [String] ?? []
                if errors.isEmpty { return try refuse(reply) }
                FileHandle.standardError.write(Data("vigil ctl: reload refused; the running configuration stays:\n".utf8))
                for e in errors { FileHandle.standardError.write(Data("  \(e)\n".utf8)) }
                throw ExitCode(1)
            }
            for what in ["monitors", "sinks"] {
                let diff = object[what] as? [String: [String]] ?? [:]
                let parts = [("added", "added"), ("removed", "removed"), ("changed", "restarted")].compactMap { key, word in
                    (diff[key] ?? []).isEmpty ? nil : "\(word) \(diff[key]!.joined(separator: ", "))"
                }
                let unchanged = diff["unchanged"]?.count ?? 0
                print("\(what): \(parts.isEmpty ? "no change" : parts.joined(separator: "; "))\(unchanged > 0 ? " (\(unchanged) unchanged)" : "")")
            }
            for w in object["warnings"] as? [String] ?? [] { print("warning: \(w)") }
        }
    }

    struct Restart: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Stop one monitor (when running) and start it again, with a fresh restart budget.")
        @Argument(help: "The monitor's name in the manifest.") var monitor: String
        @OptionGroup var connection: Connection

        func run() async throws { try await act(connection, monitor, "restart") }
    }
}

private func act(_ connection: Ctl.Connection, _ monitor: String, _ verb: String) async throws {
    let name = monitor.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? monitor
    let reply = try await connection.ask(.POST, "/v1/monitors/\(name)/\(verb)")
    guard (200..<300).contains(reply.status) else { return try refuse(reply) }
    if connection.json {
        print(reply.text, terminator: "")
    } else {
        print("\(verb) of \(monitor): asked")
    }
}

/// The API's error, on stderr, and exit 1.
private func refuse(_ reply: ControlClient.Reply) throws {
    let object = (try? JSONSerialization.jsonObject(with: Data(reply.body))) as? [String: Any]
    FileHandle.standardError.write(Data("vigil ctl: \(object?["error"] as? String ?? reply.text) (HTTP \(reply.status))\n".utf8))
    throw ExitCode(1)
}

/// Columns padded to their widest cell, the last one left ragged.
private func printTable(_ rows: [[String]]) {
    guard let width = rows.first?.count else { return }
    var widths = Array(repeating: 0, count: width)
    for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
    for row in rows {
        let cells = row.enumerated().map { i, cell in
            i == row.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0)
        }
        print(cells.joined(separator: "  ").trimmingCharacters(in: .whitespaces))
    }
}

/// `vigil run`'s --control-tcp, --control-token-file and --control-tcp-allow-remote.
enum ControlTCPOptions {
    static func listener(address: String?, tokenFile: String?, allowRemote: Bool, logger: Logger) throws -> ControlTCPListener? {
        guard let address else {
            if tokenFile != nil { throw ValidationError("--control-token-file is the token of --control-tcp, which is not given") }
            if allowRemote { throw ValidationError("--control-tcp-allow-remote needs --control-tcp") }
            return nil
        }
        guard let tokenFile else {
            throw ValidationError("--control-tcp needs --control-token-file FILE: the bearer token every request must carry (a file of mode 0600; created with a new token if it does not exist)")
        }
        do {
            return try ControlTCPListener(address: ControlTCPAddress(parsing: address, allowPortZero: true), tokenFile: tokenFile,
                                          allowRemote: allowRemote, log: { logger.notice("\($0)") })
        } catch let error as ControlError {
            FileHandle.standardError.write(Data("vigil: \(error)\n".utf8))
            throw ExitCode(2)
        }
    }
}
