#if Postgres
import CoalescingOperations
import CoalescingPostgres
import Foundation
import Logging
import PostgresNIO
import TestSupport
import XCTest

/// Two coalescers on one table in this process stand for two instances: each has its own in-process
/// coalescer and its own database connections, exactly as two processes would.
final class InstanceControlsTests: XCTestCase {
    private func instances(_ name: String, configure: (inout PostgresCoalescerConfiguration) -> Void = { _ in })
        throws -> (PostgresCoalescer<String>, PostgresCoalescer<String>)
    {
        var configuration = try Database.configuration(name)
        configure(&configuration)
        return (
            try PostgresCoalescer(configuration: configuration), try PostgresCoalescer(configuration: configuration)
        )
    }

    /// Starts work for `key` on `leader` that waits at `gate`, and returns its caller's task once
    /// the work has started.
    private func lead(
        _ leader: PostgresCoalescer<String>, key: String, gate: WorkGate, whenAbandoned: AbandonedWorkPolicy = .cancel,
        work: @escaping @Sendable () async throws -> String = { "leader's" }
    ) async throws -> Task<String, any Error> {
        let task = Task {
            try await leader.value(key: key, whenAbandoned: whenAbandoned) {
                try await gate.pass()
                return try await work()
            }
        }
        try await gate.reached.wait()
        return task
    }

    private struct Standoff {
        let first: PostgresCoalescer<String>
        let second: PostgresCoalescer<String>
        let gate: WorkGate
        let leader: Task<String, any Error>
        let waiting: Task<String, any Error>
    }

    /// `first` runs the work for "k" and holds it at a gate; `second` waits for the key's lock.
    private func standoff(
        _ name: String, whenAbandoned: AbandonedWorkPolicy = .cancel,
        configure: (inout PostgresCoalescerConfiguration) -> Void = { _ in },
        work: @escaping @Sendable () async throws -> String = { "leader's" }
    ) async throws -> Standoff {
        let (first, second) = try instances(name, configure: configure)
        let gate = WorkGate()
        let leader = try await lead(first, key: "k", gate: gate, whenAbandoned: whenAbandoned, work: work)
        let waiting = Task { try await second.value(key: "k") { "second's" } }
        try await waitForSteps(1)
        return Standoff(first: first, second: second, gate: gate, leader: leader, waiting: waiting)
    }

    private func waitForSteps(_ count: Int) async throws {
        try await Database.withConnection { connection in
            await waitUntil("\(count) database steps wait for a lock") {
                (try? await Database.stepsWaiting(on: connection)) == count
            }
        }
    }

    // Guarantee 28.
    func testAnInstanceThatJoinsAnotherInstancesWorkGetsItsValueWithoutRunningAndCountsIt() async throws {
        let standoff = try await standoff("join")
        standoff.gate.release.open()
        let leaderValue = try await standoff.leader.value
        let joinerValue = try await standoff.waiting.value
        XCTAssertEqual([leaderValue, joinerValue], ["leader's", "leader's"])
        XCTAssertEqual(standoff.first.statistics.runsHere, 1)
        XCTAssertEqual(standoff.second.statistics.runsHere, 0)
        XCTAssertEqual(standoff.second.statistics.servedFromAnotherProcess, 1)
    }

    // Guarantee 28: coalescing is not caching.
    func testACallerArrivingAfterTheWorkEndedRunsItAgain() async throws {
        let (first, second) = try instances("after")
        let firstValue = try await first.value(key: "k") { "first" }
        let secondValue = try await second.value(key: "k") { "second" }
        XCTAssertEqual([firstValue, secondValue], ["first", "second"])
        XCTAssertEqual(second.statistics.servedFromAnotherProcess, 0)
    }

    // Guarantee 29.
    func testTwoKeysWhoseLockHashesCollideTakeTurnsAndEachGetsItsOwnValue() async throws {
        let (first, second) = try instances("collision")
        let (one, other) = try await Database.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT min(k), max(k) FROM (SELECT 'key' || g AS k, hashtext('key' || g) AS h FROM generate_series(1, 300000) g) s
                GROUP BY h HAVING count(*) > 1 LIMIT 1
                """, logger: Database.logger)
            for try await pair in rows.decode((String, String).self) { return pair }
            throw XCTSkip("no two keys of 300,000 share a hash")
        }
        let gate = WorkGate()
        let leader = try await lead(first, key: one, gate: gate) { "value of \(one)" }
        let otherKey = Task { try await second.value(key: other) { "value of \(other)" } }
        try await waitForSteps(1)  // the collision serialises: the other key waits for the lock
        gate.release.open()
        let leaderValue = try await leader.value
        let otherValue = try await otherKey.value
        XCTAssertEqual(leaderValue, "value of \(one)")
        XCTAssertEqual(otherValue, "value of \(other)", "never the other key's result")
        XCTAssertEqual(second.statistics.runsHere, 1)
    }

    // Guarantee 31.
    func testACallersTimeoutWhileAnotherInstanceLeadsEndsOnlyThatCaller() async throws {
        let standoff = try await standoff("timeout")
        let hasty = Task { try await standoff.second.value(key: "k", timeout: .milliseconds(100)) { "second's" } }
        await XCTAssertThrowsCoalescingError(.timedOut, try await hasty.value)
        standoff.gate.release.open()
        let leaderValue = try await standoff.leader.value
        let patientValue = try await standoff.waiting.value
        XCTAssertEqual([leaderValue, patientValue], ["leader's", "leader's"])
        XCTAssertEqual(standoff.second.statistics.local.callersTimedOut, 1)
    }

    // Guarantees 30 and 31.
    func testWorkAbandonedByItsLastCallerIsTakenOverByAWaitingInstance() async throws {
        let standoff = try await standoff("abandoned")
        standoff.leader.cancel()
        let value = try await standoff.waiting.value
        XCTAssertEqual(value, "second's")
        XCTAssertEqual(standoff.second.statistics.takeOvers, 1)
        XCTAssertEqual(standoff.first.statistics.local.workCancelled, 1)
    }

    // Guarantee 31.
    func testWorkThatRunsToCompletionWhenAbandonedStillServesTheOtherInstance() async throws {
        let standoff = try await standoff("completion", whenAbandoned: .runToCompletion)
        standoff.leader.cancel()
        standoff.gate.release.open()
        let value = try await standoff.waiting.value
        XCTAssertEqual(value, "leader's")
        XCTAssertEqual(standoff.second.statistics.servedFromAnotherProcess, 1)
    }

    // Guarantee 32.
    func testAnErrorCrossesToTheOtherInstanceAsItsDescription() async throws {
        struct UpstreamDown: Error, CustomStringConvertible { var description: String { "upstream down" } }
        let standoff = try await standoff("error", work: { throw UpstreamDown() })
        standoff.gate.release.open()
        do {
            _ = try await standoff.leader.value
            XCTFail("the leader's caller got a value")
        } catch { XCTAssertTrue(error is UpstreamDown) }
        do {
            _ = try await standoff.waiting.value
            XCTFail("the waiting instance got a value")
        } catch {
            XCTAssertEqual(error as? CoalescingPostgresError, .failedInAnotherProcess("upstream down"))
        }
    }

    // Guarantee 33.
    func testAValueTooLargeToPublishReachesItsOwnInstanceAndAClearErrorElsewhere() async throws {
        let large = String(repeating: "x", count: 100)
        let standoff = try await standoff("large", configure: { $0.maximumValueBytes = 16 }) { large }
        standoff.gate.release.open()
        let leaderValue = try await standoff.leader.value
        XCTAssertEqual(leaderValue, large)
        do {
            _ = try await standoff.waiting.value
            XCTFail("the waiting instance got a value")
        } catch {
            XCTAssertEqual(error as? CoalescingPostgresError, .valueTooLarge(bytes: 102, limit: 16))
        }
        XCTAssertEqual(standoff.first.statistics.valuesTooLarge, 1)
    }

    // Guarantee 35.
    func testAfterForgetTheNextCallerWaitsForARunThatStartsAfterIt() async throws {
        let (first, second) = try instances("forget")
        let gate = WorkGate()
        let leader = try await lead(first, key: "k", gate: gate)
        second.forget(key: "k")  // say, after a write that the leader's run started before
        let reader = Task { try await second.value(key: "k") { "after the write" } }
        try await waitForSteps(1)
        gate.release.open()
        _ = try await leader.value
        let value = try await reader.value
        XCTAssertEqual(value, "after the write")
    }

    // Guarantee 35.
    func testCancelActsOnThisInstanceOnly() async throws {
        let standoff = try await standoff("cancel")
        XCTAssertTrue(standoff.second.cancel(key: "k"))
        await XCTAssertThrowsCoalescingError(.cancelled, try await standoff.waiting.value)
        standoff.gate.release.open()
        let value = try await standoff.leader.value
        XCTAssertEqual(value, "leader's")
    }

    // Guarantee 34.
    func testAnUnreachableDatabaseRunsTheWorkLocallyOrFailsClearlyAndLogsOnce() async throws {
        let logged = LockedBox<[String]>([])
        var configuration = try Database.configuration("unreachable")
        configuration.connection = .init(
            host: "127.0.0.1", port: 1, username: "nobody", password: nil, database: nil, tls: .disable)
        let events = LockedBox<[String]>([])
        let local = try PostgresCoalescer<String>(
            configuration: configuration, logger: Logger(label: "test") { _ in CapturingLogHandler(lines: logged) },
            observer: { event in events.mutate { $0.append("\(event)") } })
        for _ in 1...2 {
            let value = try await local.value(key: "k") { "local" }
            XCTAssertEqual(value, "local")
        }
        XCTAssertEqual(local.statistics.databaseUnavailable, 2)
        XCTAssertEqual(local.statistics.ranWithoutDatabase, 2)
        XCTAssertEqual(logged.value.count, 1, "logged once: \(logged.value)")
        XCTAssertEqual(events.value.filter { $0.hasPrefix("databaseUnavailable") }.count, 2)

        configuration.whenDatabaseUnavailable = .fail
        let failing = try PostgresCoalescer<String>(configuration: configuration)
        do {
            _ = try await failing.value(key: "k") { "local" }
            XCTFail("a value without the database")
        } catch CoalescingPostgresError.databaseUnavailable {
        }
    }
}

/// Keeps every line logged at error level or above.
struct CapturingLogHandler: LogHandler {
    let lines: LockedBox<[String]>
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        if event.level >= .error { lines.mutate { $0.append("\(event.message)") } }
    }
}
#endif
