#if Postgres
import CoalescingPostgres
import Foundation
import TestSupport
import XCTest

/// The app's service group ends, whatever ends it (Guarantee 34): each scenario is an app of its
/// own, `coalescing-postgres-probe --group`, whose group holds the app's `PostgresClient`, the
/// coalescer on that client and a service of the app; the process must exit, and promptly.
final class GroupEndTests: XCTestCase {
    /// Each start of a scenario may end in a different order of the group's cancellations: a few
    /// starts per test, each a few seconds at most.
    private let starts = 3

    // Guarantee 34: an error of another service, after a first value went through the database,
    // ends the group and the process with that error.
    func testAServiceThatThrowsAfterAFirstValueEndsTheGroupAndTheProcessWithItsError() throws {
        for start in 1...starts {
            let probe = try GroupProbe(scenario: "service-throws", table: Database.configuration("group").table)
            let ended = probe.waitForExit(seconds: 10)
            XCTAssertTrue(ended, "start \(start): the process still ran 10 s after its start: \(probe.output)")
            XCTAssertTrue(probe.output.contains("first value: through the database, runs here 1"), probe.output)
            XCTAssertTrue(probe.output.contains("error: the app's service failed"), probe.output)
            XCTAssertEqual(probe.status, 1, probe.output)
            let teardown = try XCTUnwrap(probe.seconds(fromLine: "first value"), probe.output) - 1
            XCTAssertLessThan(teardown, 2, "it ended promptly once the service threw, 1 s after: \(probe.output)")
        }
    }

    // Guarantee 34: an error at once, while the session connects, ends the group too.
    func testAServiceThatThrowsAtOnceWhileTheSessionConnectsEndsTheGroupAndTheProcess() throws {
        for start in 1...starts {
            let probe = try GroupProbe(
                scenario: "service-throws", table: Database.configuration("group").table,
                extra: ["--fail-after-ms", "0"])
            XCTAssertTrue(probe.waitForExit(seconds: 10), "start \(start): \(probe.output)")
            XCTAssertTrue(probe.output.contains("error: the app's service failed"), probe.output)
            XCTAssertEqual(probe.status, 1, probe.output)
        }
    }

    // Guarantees 34 and 35: a readiness check that fails (the schema is not there) ends the start.
    func testAFailingReadinessCheckEndsTheGroupAndTheProcessWithTheSchemasError() throws {
        for start in 1...starts {
            let probe = try GroupProbe(scenario: "readiness", table: Database.configuration("ready").table)
            XCTAssertTrue(probe.waitForExit(seconds: 10), "start \(start): \(probe.output)")
            XCTAssertTrue(probe.output.contains("error: the schema is not ready: the table"), probe.output)
            XCTAssertEqual(probe.status, 1, probe.output)
        }
    }

    // Guarantee 34: SIGTERM ends a group whose coalescer serves, gracefully, and the process exits 0.
    func testSIGTERMEndsTheGroupAndTheProcess() throws {
        for start in 1...starts {
            let probe = try GroupProbe(scenario: "sigterm", table: Database.configuration("term").table)
            XCTAssertTrue(probe.waitForLine("ready", seconds: 30), "start \(start): \(probe.output)")
            XCTAssertEqual(kill(probe.process.processIdentifier, SIGTERM), 0)
            XCTAssertTrue(probe.waitForExit(seconds: 10), "start \(start): SIGTERM did not end it: \(probe.output)")
            XCTAssertTrue(probe.output.contains("\nended\n"), probe.output)
            XCTAssertEqual(probe.status, 0, probe.output)
        }
    }
}

/// One start of `coalescing-postgres-probe --group <scenario>`, its output read as it comes.
final class GroupProbe: @unchecked Sendable {
    // @unchecked: the process is started once in `init`; what changes later is in locked boxes.
    let process = Process()
    private let text = LockedBox("")
    /// When each line was read, and when the process ended.
    private let heard = LockedBox<[(line: Substring, at: ContinuousClock.Instant)]>([])
    private let exited = LockedBox<ContinuousClock.Instant?>(nil)
    private let lines = DispatchSemaphore(value: 0)
    private let ended = DispatchSemaphore(value: 0)
    /// The end of the output: after the process ended, what it wrote last may still be unread.
    private let drained = DispatchSemaphore(value: 0)

    init(scenario: String, table: String, extra: [String] = []) throws {
        let pipe = Pipe()
        process.executableURL = ProbeFleet.executable
        process.arguments =
            ["--url", try Database.url(), "--runs-file", "/dev/null", "--table", table, "--group", scenario] + extra
        process.standardOutput = pipe
        process.standardError = pipe
        process.environment = ProcessInfo.processInfo.environment.merging(["SWIFT_BACKTRACE": "enable=no"]) { $1 }
        pipe.fileHandleForReading.readabilityHandler = { [text, heard, lines, drained] handle in
            let data = handle.availableData
            guard !data.isEmpty else {
                handle.readabilityHandler = nil
                drained.signal()
                return
            }
            let now = ContinuousClock.now
            let chunk = String(decoding: data, as: UTF8.self)
            text.mutate { $0 += chunk }
            heard.mutate { $0 += chunk.split(separator: "\n").map { ($0, now) } }
            lines.signal()
        }
        process.terminationHandler = { [ended, exited] _ in
            exited.value = .now
            ended.signal()
        }
        try process.run()
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// What the probe printed so far.
    var output: String { text.value }

    /// Its exit status, once it exited.
    var status: Int32 { process.terminationStatus }

    /// Seconds from the first line that starts with `prefix` to the process's end, once it ended.
    func seconds(fromLine prefix: String) -> Double? {
        guard let end = exited.value, let start = heard.value.first(where: { $0.line.hasPrefix(prefix) })?.at else {
            return nil
        }
        let elapsed = end - start
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    /// Waits until the probe printed `line` on a line of its own, at most `seconds`.
    func waitForLine(_ line: String, seconds: Double) -> Bool {
        let deadline = DispatchTime.now() + seconds
        while !("\n" + output).contains("\n\(line)\n") {
            guard lines.wait(timeout: deadline) == .success else { return false }
        }
        return true
    }

    /// Waits until the probe exits, at most `seconds`; then kills it (SIGKILL: a hung group ignores
    /// SIGTERM) and says it had not ended.
    func waitForExit(seconds: Double) -> Bool {
        if ended.wait(timeout: .now() + seconds) == .success {
            _ = drained.wait(timeout: .now() + 10)
            return true
        }
        kill(process.processIdentifier, SIGKILL)
        ended.wait()
        return false
    }
}
#endif
