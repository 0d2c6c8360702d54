import Foundation
import Glibc
import Testing

/// `include:` through the real `vigil validate`: fragments on a real file
/// system, a conflict reported at both places, and fragments that would hang
/// or exhaust a reader that trusted them.
@Suite(.startsProcesses, .offThePool) struct IncludeRunTests {
    @Test func validateReportsANameDefinedInTheMainFileAndInAFragmentAtBothPlaces() throws {
        let dir = try TestEnv.tempDir()
        try FileManager.default.createDirectory(atPath: dir + "/conf.d", withIntermediateDirectories: true)
        let main = dir + "/vigil.yaml", a = dir + "/conf.d/10-a.yaml", b = dir + "/conf.d/20-b.yaml"
        try TestEnv.write("""
        include: ["conf.d/*.yaml"]
        monitors:
          cpu: { plugin: cpu }
        sinks:
          out: { type: null }
        """, to: main)
        try TestEnv.write("""
        monitors:
          load: { plugin: load }
          cpu: { plugin: cpu, interval: 5s }
        """, to: a)
        try TestEnv.write("""
        # the sink name is taken too
        sinks:
          out: { type: log }
        """, to: b)
        let result = try TestEnv.run(TestEnv.vigil, ["validate", main], timeout: 60)
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        let lines = result.stderr.split(separator: "\n").map(String.init)
        #expect(lines.contains("\(main):3:3: error: monitor 'cpu' is defined twice: here and at \(a):3:3"), "\(result.stderr)")
        #expect(lines.contains("\(a):3:3: error: monitor 'cpu' is defined twice: here and at \(main):3:3"), "\(result.stderr)")
        #expect(lines.contains("\(main):5:3: error: sink 'out' is defined twice: here and at \(b):3:3"), "\(result.stderr)")
        #expect(lines.contains("\(b):3:3: error: sink 'out' is defined twice: here and at \(main):5:3"), "\(result.stderr)")
        #expect(lines.last == "\(main): 4 errors, 0 warnings", "\(result.stderr)")
        // The main file's diagnostics come first, then each fragment's in the order read.
        let order = lines.filter { $0.contains(": error: ") }.map { String($0.prefix { $0 != ":" }) }
        #expect(order == [main, main, a, b], "\(result.stderr)")
    }

    @Test func validateChecksAFragmentsMonitorsAndCountsItsFiles() throws {
        let dir = try TestEnv.tempDir()
        try FileManager.default.createDirectory(atPath: dir + "/conf.d", withIntermediateDirectories: true)
        let main = dir + "/vigil.yaml", fragment = dir + "/conf.d/mem.yaml"
        try TestEnv.write("include: conf.d/*.yaml\nmonitors:\n  cpu: { plugin: cpu }\nsinks:\n  out: { type: null }\n", to: main)
        try TestEnv.write("monitors:\n  mem: { plugin: memory, options: { nonsense: 1 } }\n", to: fragment)
        var result = try TestEnv.run(TestEnv.vigil, ["validate", main], timeout: 60)
        #expect(result.status == 1)
        // The plugin's self-description judges a fragment's options, at the fragment's place.
        #expect(result.stderr.contains("\(fragment):2:"), "\(result.stderr)")
        #expect(result.stderr.contains("nonsense"), "\(result.stderr)")

        try TestEnv.write("monitors:\n  mem: { plugin: memory }\n", to: fragment)
        result = try TestEnv.run(TestEnv.vigil, ["validate", main], timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("\(main) and 1 included file: valid: 2 monitors"), "\(result.stdout)")
        #expect(result.stdout.contains("  mem: isolation: none"), "\(result.stdout)")
    }

    @Test func hostileFragmentsAreErrorsAtThePatternNeverAHang() throws {
        let dir = try TestEnv.tempDir()
        let conf = dir + "/conf.d"
        try FileManager.default.createDirectory(atPath: conf + "/dir.yaml", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: conf + "/loop.yaml", withDestinationPath: conf + "/loop.yaml")
        try FileManager.default.createSymbolicLink(atPath: conf + "/zero.yaml", withDestinationPath: "/dev/zero")
        #expect(mkfifo(conf + "/fifo.yaml", 0o600) == 0)
        let main = dir + "/vigil.yaml"
        try TestEnv.write("""
        include:
          - conf.d/*.yaml
          - /dev/zero
        monitors:
          cpu: { plugin: cpu }
        sinks:
          out: { type: null }
        """, to: main)
        let start = Date()
        let result = try TestEnv.run(TestEnv.vigil, ["validate", main], timeout: 60)
        #expect(Date().timeIntervalSince(start) < 30)
        #expect(result.status == 1, "\(result.stderr)")
        let at = "\(main):2:5: error: cannot include \(conf)/"
        #expect(result.stderr.contains(at + "dir.yaml (matched by 'conf.d/*.yaml'): it is a directory"), "\(result.stderr)")
        #expect(result.stderr.contains(at + "fifo.yaml (matched by 'conf.d/*.yaml'): not a regular file (a FIFO)"), "\(result.stderr)")
        #expect(result.stderr.contains(at + "loop.yaml (matched by 'conf.d/*.yaml'): Too many levels of symbolic links"), "\(result.stderr)")
        #expect(result.stderr.contains(at + "zero.yaml (matched by 'conf.d/*.yaml'): not a regular file (a character device)"), "\(result.stderr)")
        #expect(result.stderr.contains("\(main):3:5: error: cannot include /dev/zero: not a regular file (a character device)"), "\(result.stderr)")
    }

    @Test func theShippedExampleWithIncludesIsValid() throws {
        let main = TestEnv.repoRoot + "/manifests/examples/includes.yaml"
        let result = try TestEnv.run(TestEnv.vigil, ["validate", main], timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("and 2 included files: valid: 3 monitors (3 enabled), 2 sinks, 1 threshold, 1 rule"), "\(result.stdout)")
    }
}
