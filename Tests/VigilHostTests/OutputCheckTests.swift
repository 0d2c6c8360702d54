import Foundation
import Testing

/// `vigil plugins check` on outputs: besides batches written twice and a
/// flush, a second instance gets odd events (none, empty and 4 KiB strings,
/// NaN, infinities, extreme integers, odd monitor names), a batch of one
/// and one of 500, and is destroyed with its last batch pending; a crash is
/// reported with the call it happened in.
@Suite(.startsProcesses, .offThePool) struct OutputCheckTests {
    @Test func anOutputThatCrashesOnAnEventWithoutFieldsFailsWithTheCall() throws {
        let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", try TestEnv.cPlugin("output_fragile")], timeout: 60)
        #expect(check.status == 1, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("PASS  output: batches written, flushed"), "\(check.stdout)")
        #expect(check.stdout.contains("FAIL  output: odd events, closed with a batch pending  the plugin crashed: SIGSEGV (Segmentation fault) in write of instance b"),
                "\(check.stdout)")
        #expect(check.stdout.hasSuffix("4 passed, 1 failed\n"), "\(check.stdout)")
    }

    @Test func theShippedOutputsPassTheOddEvents() throws {
        for name in ["graphite", "output_min"] {
            let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", try TestEnv.cPlugin(name)], timeout: 60)
            #expect(check.status == 0, "\(name): \(check.stdout)\(check.stderr)")
            #expect(check.stdout.contains("PASS  output: odd events, closed with a batch pending  4 odd events: "), "\(check.stdout)")
            #expect(check.stdout.contains("500 events (a plugin sink's default batch): "), "\(check.stdout)")
            #expect(check.stdout.contains("stopped and destroyed without a flush"), "\(check.stdout)")
            #expect(check.stdout.hasSuffix("5 passed, 0 failed\n"), "\(check.stdout)")
        }
    }
}
