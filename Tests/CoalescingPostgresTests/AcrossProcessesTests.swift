#if Postgres
import CoalescingPostgres
import Foundation
import TestSupport
import XCTest

/// Separate OS processes, one caller each, sharing one PostgreSQL: the fleet the coalescer is for.
final class AcrossProcessesTests: XCTestCase {
    private let processes = 4

    // Guarantee 28.
    func testFourProcessesAskingForOneKeyRunTheWorkOncePerBurstAndAllGetItsValue() async throws {
        let table = Database.configuration("fleet").table
        let fleet = try ProbeFleet()
        for burst in 1...2 {
            let gate = try await FleetGate.hold()
            try fleet.start(processes, key: "profile:ada", table: table, gate: gate.key)
            try await fleet.waitForBurst(waiting: processes - 1, runs: burst)
            await gate.open()
            await fleet.waitForAll(seconds: 30)
            XCTAssertEqual(fleet.runs.count, burst, "one run per burst")
        }
        XCTAssertEqual(fleet.answers, Array(repeating: "value: value of profile:ada", count: 2 * processes))
    }

    // Guarantee 30.
    func testWhenTheLeadingProcessIsKilledAWaitingProcessRunsTheWorkAndEveryOtherCallerGetsItsValue() async throws {
        let table = Database.configuration("killed").table
        let fleet = try ProbeFleet()
        let gate = try await FleetGate.hold()
        try fleet.start(processes, key: "report:q3", table: table, gate: gate.key)
        try await fleet.waitForBurst(waiting: processes - 1, runs: 1)

        let leader = try XCTUnwrap(fleet.runs.first)
        XCTAssertEqual(kill(leader, SIGKILL), 0)
        // Its session ends with it, and with it the lock: exactly one waiting process takes over, at
        // its next take-over check.
        try await fleet.waitForBurst(waiting: processes - 1, runs: 2)
        await gate.open()
        await fleet.waitForAll(seconds: 30)

        XCTAssertEqual(fleet.runs.count, 2, "the killed run, and the one that took over")
        let survivors = fleet.probes.indices.filter { fleet.probes[$0].processIdentifier != leader }
        XCTAssertEqual(survivors.map { fleet.answers[$0] }, Array(repeating: "value: value of report:q3", count: 3))
        XCTAssertEqual(survivors.filter { fleet.output(of: $0).contains("takeOvers 1") }.count, 1)
    }
}
#endif
