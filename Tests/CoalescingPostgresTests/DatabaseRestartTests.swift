#if Postgres
import CoalescingPostgres
import Foundation
import TestSupport
import XCTest

/// PostgreSQL restarted under a burst of separate processes.
final class DatabaseRestartTests: XCTestCase {
    // Guarantee 34.
    func testARestartMidBurstEndsEveryCallerWithTheValueAndTheNextBurstRunsOnce() async throws {
        guard let restart = ProcessInfo.processInfo.environment["COALESCING_POSTGRES_RESTART"] else {
            throw XCTSkip(
                "COALESCING_POSTGRES_RESTART is not set: .ci/postgres sets the command that restarts the cluster")
        }
        let table = Database.configuration("restart").table
        let fleet = try ProbeFleet()
        let gate = try await FleetGate.hold()
        try fleet.start(4, key: "feed:home", table: table, gate: gate.key)
        try await fleet.waitForBurst(waiting: 3, runs: 1)

        let started = ContinuousClock.now
        // system(3), not Process: Foundation was seen to report the restart command running long
        // after it had exited (the restarted server inherits its descriptors).
        XCTAssertEqual(system(restart), 0, "the restart command failed")
        await gate.open()
        // Every connection ended with the restart: the leader's work passes its lost gate, and each
        // waiting process runs the work on its own (DatabaseUnavailablePolicy.runLocally).
        await fleet.waitForAll(seconds: 30)
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(30))
        XCTAssertEqual(fleet.answers, Array(repeating: "value: value of feed:home", count: 4))
        XCTAssertLessThanOrEqual(fleet.runs.count, 4, "at most one run per process")

        try await Database.waitUntilReachable()
        let nextFleet = try ProbeFleet()
        let nextGate = try await FleetGate.hold()
        try nextFleet.start(4, key: "feed:home", table: table, gate: nextGate.key)
        try await nextFleet.waitForBurst(waiting: 3, runs: 1)
        await nextGate.open()
        await nextFleet.waitForAll(seconds: 30)
        XCTAssertEqual(nextFleet.runs.count, 1, "the next burst runs once across the processes again")
        XCTAssertEqual(nextFleet.answers, Array(repeating: "value: value of feed:home", count: 4))
    }
}
#endif
