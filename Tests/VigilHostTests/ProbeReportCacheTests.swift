import Foundation
import Synchronization
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// A run's probes across reloads: a plugin file is probed again only when
/// it changed.
@Suite struct ProbeReportCacheTests {
    @Test func anUnchangedFileIsProbedOnceAndAChangedOneAgain() throws {
        let dir = try TestEnv.tempDir()
        let path = dir + "/libx.so"
        try Data("first".utf8).write(to: URL(fileURLWithPath: path))
        let cache = ProbeReportCache()
        let probes = Atomic<Int>(0)
        let probe = { () -> ProbeReport in
            probes.wrappingAdd(1, ordering: .relaxed)
            return ProbeReport()
        }
        _ = cache.report(for: path, allowUnsafe: false, probe: probe)
        _ = cache.report(for: path, allowUnsafe: false, probe: probe)
        #expect(probes.load(ordering: .relaxed) == 1)
        // Another policy is another probe.
        _ = cache.report(for: path, allowUnsafe: true, probe: probe)
        #expect(probes.load(ordering: .relaxed) == 2)
        // A new build dropped in its place (another inode, size and time).
        let next = dir + "/libx.so.new"
        try Data("second build".utf8).write(to: URL(fileURLWithPath: next))
        #expect(rename(next, path) == 0)
        _ = cache.report(for: path, allowUnsafe: true, probe: probe)
        #expect(probes.load(ordering: .relaxed) == 3)
        _ = cache.report(for: path, allowUnsafe: true, probe: probe)
        #expect(probes.load(ordering: .relaxed) == 3)
    }
}
