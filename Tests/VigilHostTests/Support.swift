import Foundation
import Synchronization
import Testing

/// Paths and helpers shared by the host tests: the repository, the build's
/// products (the real `vigil` binary and the Swift plugins), and the C plugins,
/// built once per test run with `scripts/build-c-plugins`.
enum TestEnv {
    static let repoRoot: String = {
        var dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while dir.path != "/" {
            if FileManager.default.fileExists(atPath: dir.appendingPathComponent("Package.swift").path) { return dir.path }
            dir.deleteLastPathComponent()
        }
        fatalError("Package.swift not found above \(#filePath)")
    }()

    /// The directory holding the test runner, which is the build's products directory.
    static let productsDir: String = {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // swift-testing may run from inside an .xctest bundle directory.
        while url.path != "/", !FileManager.default.fileExists(atPath: url.appendingPathComponent("vigil").path) {
            url.deleteLastPathComponent()
        }
        return url.path
    }()

    static var vigil: String { productsDir + "/vigil" }

    static func fixture(_ relative: String) -> String { repoRoot + "/Tests/Fixtures/" + relative }

    private static let cPluginsOnce = Mutex<String?>(nil)

    /// The directory of the cc-built C plugins (heartbeat and the ABI fixtures).
    static func cPlugins() throws -> String {
        try cPluginsOnce.withLock { built in
            if let built { return built }
            let dir = productsDir + "/c-plugins"
            let result = try run(repoRoot + "/scripts/build-c-plugins", [dir, "--tests"], timeout: 120)
            guard result.status == 0 else {
                throw TestFailure("scripts/build-c-plugins failed (\(result.status)): \(result.stderr)")
            }
            built = dir
            return dir
        }
    }

    static func cPlugin(_ name: String) throws -> String { try cPlugins() + "/\(name).so" }

    /// A fresh directory under the system temp directory.
    static func tempDir(_ tag: String = #function) throws -> String {
        let name = tag.filter { $0.isLetter || $0.isNumber }
        let path = NSTemporaryDirectory() + "vigil-test-\(name)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs a program to completion (killing it after `timeout` seconds).
    static func run(_ program: String, _ arguments: [String], environment: [String: String]? = nil,
                    timeout: TimeInterval = 60) throws -> Output {
        let process = try start(program, arguments, environment: environment)
        return process.wait(timeout: timeout)
    }

    static func start(_ program: String, _ arguments: [String], environment: [String: String]? = nil) throws -> RunningProcess {
        try RunningProcess(program, arguments, environment: environment)
    }

    static func write(_ text: String, to path: String) throws {
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A child process whose output is collected in the background.
final class RunningProcess: @unchecked Sendable {
    let process = Process()
    private let out = Pipe(), err = Pipe()
    private let collected = Mutex<(Data, Data)>((Data(), Data()))
    private let readers = DispatchGroup()

    init(_ program: String, _ arguments: [String], environment: [String: String]?) throws {
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        if let environment {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        }
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        for (handle, isOut) in [(out.fileHandleForReading, true), (err.fileHandleForReading, false)] {
            readers.enter()
            DispatchQueue.global().async { [self] in
                let data = handle.readDataToEndOfFile()
                self.collected.withLock { if isOut { $0.0 = data } else { $0.1 = data } }
                self.readers.leave()
            }
        }
    }

    var pid: Int32 { process.processIdentifier }

    func signal(_ sig: Int32) { kill(process.processIdentifier, sig) }

    /// Waits for exit; kills the process after `timeout` seconds.
    func wait(timeout: TimeInterval = 60) -> TestEnv.Output {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
        readers.wait()
        let (o, e) = collected.withLock { $0 }
        return TestEnv.Output(status: process.terminationStatus,
                              stdout: String(decoding: o, as: UTF8.self), stderr: String(decoding: e, as: UTF8.self))
    }
}
