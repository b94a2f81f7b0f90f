#if Postgres
import CoalescingOperations
import CoalescingPostgres
import Foundation
import TestSupport
import XCTest

/// The defaults against an outage: PostgreSQL stopped under callers with the server article's
/// timeout (Guarantee 34).
final class OutageTests: XCTestCase {
    // Guarantee 34: with the default `connectTimeout` (1 s) and callers at 3 s, the server
    // article's recipe, a 3 s stop of PostgreSQL times no caller out: each is answered, its work
    // run in this process while the database is away.
    func testCallersWithTheArticlesTimeoutAreAnsweredThroughAStopOfTheDatabase() async throws {
        guard let control = ProcessInfo.processInfo.environment["COALESCING_POSTGRES_CONTROL"] else {
            throw XCTSkip(
                "COALESCING_POSTGRES_CONTROL is not set: .ci/postgres sets the command that stops the cluster")
        }
        let coalescer = try runningCoalescer(self, configuration: Database.configuration("outage"))
        _ = try await coalescer.value(key: "warm") { "the session is up" }
        XCTAssertTrue(coalescer.isSessionReady)

        // system(3), not Process: as DatabaseRestartTests says, the server inherits descriptors.
        XCTAssertEqual(system("\(control) stop-cluster"), 0, "the stop command failed")
        addTeardownBlock { _ = system("\(control) start-cluster") }
        let stopped = ContinuousClock.now
        let outcomes = await withTaskGroup(of: [String].self) { group in
            for caller in 0..<8 {
                group.addTask {
                    var outcomes: [String] = []
                    // The outage's length, not a wait for something: callers keep coming for 3 s.
                    while ContinuousClock.now - stopped < .seconds(3) {
                        do {
                            let key = "outage-\(caller)-\(outcomes.count)"
                            let value = try await coalescer.value(key: key, timeout: .seconds(3)) { key }
                            outcomes.append(value == key ? "answered" : "wrong value")
                        } catch {
                            outcomes.append("\(error)")
                        }
                    }
                    return outcomes
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        XCTAssertEqual(system("\(control) start-cluster"), 0, "the start command failed")
        try await Database.waitUntilReachable()

        XCTAssertEqual(outcomes.filter { $0 != "answered" }, [], "every caller answered, none timed out")
        XCTAssertGreaterThan(outcomes.count, 8)
        XCTAssertGreaterThan(coalescer.statistics.ranWithoutDatabase, 0, "the work ran here meanwhile")
        // And once the database is back, the work runs through it again.
        await waitUntil("the session is up again", seconds: 10) { coalescer.isSessionReady }
        let ranHere = coalescer.statistics.runsHere
        _ = try await coalescer.value(key: "after") { "through the database" }
        XCTAssertEqual(coalescer.statistics.runsHere, ranHere + 1)
    }
}
#endif
