#if Postgres
import CoalescingPostgres
import Foundation
import PostgresNIO
import TestSupport
import XCTest

/// A leader keeps its lock while its work runs, or knows it lost it (Guarantee 30).
final class LeaderLockTests: XCTestCase {
    // Guarantee 30: the database's idle timeouts do not cut a running leader's session.
    func testIdleTimeoutsOfTheDatabaseDoNotCutALeaderWhoseWorkOutlastsThem() async throws {
        let role = "coalescing_idle_\(UInt16.random(in: 0 ... .max))"
        try await Database.execute(
            "CREATE ROLE \(unescaped: role) LOGIN SUPERUSER",
            "ALTER ROLE \(unescaped: role) SET idle_session_timeout = '400ms'",
            "ALTER ROLE \(unescaped: role) SET idle_in_transaction_session_timeout = '1s'")
        addTeardownBlock {
            try? await Database.execute("DROP OWNED BY \(unescaped: role)", "DROP ROLE IF EXISTS \(unescaped: role)")
        }
        let table = Database.configuration("idle").table
        let fleet = try ProbeFleet()
        try fleet.start(
            4, arguments: ["--key", "slow", "--table", table, "--work-ms", "1500"], url: Database.url(user: role))
        await fleet.waitForAll(seconds: 30)
        XCTAssertEqual(fleet.runs.count, 1, "one run of a 1.5 s work, though each session idles 400 ms at most")
        XCTAssertEqual(fleet.answers, Array(repeating: "value: value of slow", count: 4))
    }

    // Guarantee 30: a lock lost anyway is known within a second, and at most one take-over runs beside it.
    func testALeaderWhoseSessionIsTerminatedLearnsItAndOneProcessTakesOverBesideIt() async throws {
        let table = Database.configuration("terminated").table
        let fleet = try ProbeFleet()
        let gate = try await FleetGate.hold()
        try fleet.start(4, key: "report:q4", table: table, gate: gate.key)
        try await fleet.waitForBurst(waiting: 3, runs: 1)
        let leader = try XCTUnwrap(fleet.runs.first)

        let terminated = try await Database.withConnection { connection in
            try await Database.integer(
                """
                SELECT count(pg_terminate_backend(pid))::bigint FROM (
                    SELECT DISTINCT a.pid FROM pg_stat_activity a
                    JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' AND l.granted
                    WHERE a.application_name = \("probe-\(leader)")
                ) AS leaders
                """, on: connection)
        }
        let cut = Double(Date().timeIntervalSince1970)
        XCTAssertEqual(terminated, 1, "the leader's session, which holds the key's lock")
        try await fleet.waitForBurst(waiting: 3, runs: 2)
        let leaderIndex = try XCTUnwrap(fleet.probes.firstIndex { $0.processIdentifier == leader })
        await waitUntil("the leader says it lost its lock") { fleet.output(of: leaderIndex).contains("lock lost") }
        let said = try XCTUnwrap(
            fleet.lines[leaderIndex].first { $0.hasPrefix("lock lost ") }.flatMap {
                Double($0.split(separator: " ")[2])
            })
        XCTAssertLessThan(said / 1e9 - cut, 1, "the leader's process learns it within a second")

        await gate.open()
        await fleet.waitForAll(seconds: 30)
        XCTAssertEqual(fleet.runs.count, 2, "the cut-off run, and one take-over beside it")
        XCTAssertEqual(fleet.answers, Array(repeating: "value: value of report:q4", count: 4))
        XCTAssertTrue(fleet.output(of: leaderIndex).contains("locksLost 1"), fleet.output(of: leaderIndex))
    }
}
#endif
