#if Postgres
import CoalescingOperations
import CoalescingPostgres
import Foundation
import Logging
import PostgresNIO
import TestSupport
import XCTest

/// Two coalescers on one table in this process stand for two processes: each has its own client,
/// session and in-process coalescer, exactly as two processes would.
final class InstanceControlsTests: XCTestCase {
    private struct Pair {
        let first: PostgresCoalescer<String>
        let second: PostgresCoalescer<String>
        let secondEvents: FleetEventLog
    }

    private func pair(_ name: String, configure: (inout PostgresCoalescerConfiguration) -> Void = { _ in }) throws
        -> Pair
    {
        var configuration = Database.configuration(name)
        configure(&configuration)
        let events = FleetEventLog()
        return Pair(
            first: try runningCoalescer(self, configuration: configuration),
            second: try runningCoalescer(self, configuration: configuration, observer: events.record),
            secondEvents: events)
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
        let pair: Pair
        let gate: WorkGate
        let leader: Task<String, any Error>
        let waiting: Task<String, any Error>
    }

    /// `first` runs the work for `key` and holds it at a gate; `second` waits for its result.
    private func standoff(
        _ name: String, key: String = "k", whenAbandoned: AbandonedWorkPolicy = .cancel,
        configure: (inout PostgresCoalescerConfiguration) -> Void = { _ in },
        work: @escaping @Sendable () async throws -> String = { "leader's" }
    ) async throws -> Standoff {
        let pair = try pair(name, configure: configure)
        let gate = WorkGate()
        let leader = try await lead(pair.first, key: key, gate: gate, whenAbandoned: whenAbandoned, work: work)
        let waiting = Task { try await pair.second.value(key: key) { "second's" } }
        await pair.secondEvents.waitUntilWaiting(for: key)
        return Standoff(pair: pair, gate: gate, leader: leader, waiting: waiting)
    }

    // Guarantee 28.
    func testAProcessThatJoinsAnotherProcesssWorkGetsItsValueWithoutRunningAndCountsIt() async throws {
        let standoff = try await standoff("join")
        standoff.gate.release.open()
        let leaderValue = try await standoff.leader.value
        let joinerValue = try await standoff.waiting.value
        XCTAssertEqual([leaderValue, joinerValue], ["leader's", "leader's"])
        XCTAssertEqual(standoff.pair.first.statistics.runsHere, 1)
        XCTAssertEqual(standoff.pair.second.statistics.runsHere, 0)
        XCTAssertEqual(standoff.pair.second.statistics.servedFromAnotherProcess, 1)
    }

    // Guarantee 28: coalescing is not caching.
    func testACallerArrivingAfterTheWorkEndedRunsItAgain() async throws {
        let configuration = Database.configuration("after")
        let first = try runningCoalescer(self, configuration: configuration)
        let second = try runningCoalescer(self, configuration: configuration)
        let firstValue = try await first.value(key: "k") { "first" }
        // The first run's callers have their result before it is published and its lock released:
        // wait for the release, which comes after the publication.
        try await Database.withConnection { connection in
            await waitUntil("the first run's lock is released") {
                (try? await Database.integer(
                    "SELECT count(*)::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted", on: connection))
                    == 0
            }
        }
        let secondValue = try await second.value(key: "k") { "second" }
        XCTAssertEqual([firstValue, secondValue], ["first", "second"])
        XCTAssertEqual(second.statistics.servedFromAnotherProcess, 0)
        XCTAssertEqual(second.statistics.takeOvers, 0, "the next run is not a take-over")
    }

    // Guarantees 29 and 33: keys of any length and content, each run once and only for its callers.
    func testKeysOfAnyLengthAndContentRunOnceAndReachOnlyTheirOwnCallers() async throws {
        let keys = [
            String(repeating: "long key ", count: 1200), "nul\u{0}inside", "emoji 🧑‍🚀🚀", "'; DROP TABLE users; --",
            "same prefix \(String(repeating: "x", count: 3000))a",
            "same prefix \(String(repeating: "x", count: 3000))b",
        ]
        let pair = try pair("keys")
        for key in keys {
            let gate = WorkGate()
            let leader = try await lead(pair.first, key: key, gate: gate) { "value of \(key)" }
            let waiting = Task { try await pair.second.value(key: key) { "second ran \(key)" } }
            await pair.secondEvents.waitUntilWaiting(for: key)
            gate.release.open()
            let leaderValue = try await leader.value
            let waitingValue = try await waiting.value
            XCTAssertEqual(leaderValue, "value of \(key)")
            XCTAssertEqual(waitingValue, "value of \(key)", "never another key's result, never a second run")
        }
        XCTAssertEqual(pair.first.statistics.runsHere, keys.count)
        XCTAssertEqual(pair.second.statistics.runsHere, 0)
        XCTAssertEqual(pair.second.statistics.databaseErrors + pair.second.statistics.databaseUnavailable, 0)
    }

    // Guarantee 29: the table's name is always quoted, or refused when the coalescer is created.
    func testReservedWordsAndMixedCaseWorkAsTableNamesAndImpossibleNamesAreRefused() async throws {
        for name in ["order", "select", "user", "Fleet Results \(UInt16.random(in: 0 ... .max))"] {
            try await Database.execute(
                "DROP TABLE IF EXISTS \(unescaped: "\"\(name)\"")",
                "DROP SEQUENCE IF EXISTS \(unescaped: "\"\(name)_seq\"")")
            var configuration = PostgresCoalescerConfiguration()
            configuration.table = name
            let events = FleetEventLog()
            let first = try runningCoalescer(self, configuration: configuration)
            let second = try runningCoalescer(self, configuration: configuration, observer: events.record)
            let gate = WorkGate()
            let leader = try await lead(first, key: "k", gate: gate)
            let waiting = Task { try await second.value(key: "k") { "second's" } }
            await events.waitUntilWaiting(for: "k")
            gate.release.open()
            let values = [try await leader.value, try await waiting.value]
            XCTAssertEqual(values, ["leader's", "leader's"], "table \(name)")
            try await first.checkSchema()
        }
        for name in ["", "with \"quote\"", String(repeating: "x", count: 60), "nul\u{0}"] {
            var configuration = PostgresCoalescerConfiguration()
            configuration.table = name
            XCTAssertThrowsError(try PostgresCoalescer<String>(url: Database.url(), configuration: configuration)) {
                guard case .invalidConfiguration? = $0 as? CoalescingPostgresError else {
                    return XCTFail("\($0) for \(name.debugDescription)")
                }
            }
        }
    }

    // Guarantee 31.
    func testACallersTimeoutWhileAnotherProcessLeadsEndsOnlyThatCaller() async throws {
        let standoff = try await standoff("timeout")
        let hasty = Task { try await standoff.pair.second.value(key: "k", timeout: .milliseconds(100)) { "second's" } }
        await XCTAssertThrowsCoalescingError(.timedOut, try await hasty.value)
        standoff.gate.release.open()
        let leaderValue = try await standoff.leader.value
        let patientValue = try await standoff.waiting.value
        XCTAssertEqual([leaderValue, patientValue], ["leader's", "leader's"])
        XCTAssertEqual(standoff.pair.second.statistics.local.callersTimedOut, 1)
    }

    // Guarantees 30 and 31.
    func testWorkAbandonedByItsLastCallerIsTakenOverByAWaitingProcessAtOnce() async throws {
        let standoff = try await standoff("abandoned") {
            $0.takeOverInterval = .seconds(60)  // the leader's release says so: no tick is needed
        }
        standoff.leader.cancel()
        let value = try await standoff.waiting.value
        XCTAssertEqual(value, "second's")
        XCTAssertEqual(standoff.pair.second.statistics.takeOvers, 1)
        XCTAssertEqual(standoff.pair.first.statistics.local.workCancelled, 1)
    }

    // Guarantee 31.
    func testWorkThatRunsToCompletionWhenAbandonedStillServesTheOtherProcess() async throws {
        let standoff = try await standoff("completion", whenAbandoned: .runToCompletion)
        standoff.leader.cancel()
        standoff.gate.release.open()
        let value = try await standoff.waiting.value
        XCTAssertEqual(value, "leader's")
        XCTAssertEqual(standoff.pair.second.statistics.servedFromAnotherProcess, 1)
    }

    // Guarantee 32.
    func testAnErrorCrossesToTheOtherProcessAsItsDescription() async throws {
        struct UpstreamDown: Error, CustomStringConvertible { var description: String { "upstream down" } }
        let standoff = try await standoff("error", work: { throw UpstreamDown() })
        standoff.gate.release.open()
        do {
            _ = try await standoff.leader.value
            XCTFail("the leader's caller got a value")
        } catch { XCTAssertTrue(error is UpstreamDown) }
        do {
            _ = try await standoff.waiting.value
            XCTFail("the waiting process got a value")
        } catch {
            XCTAssertEqual(error as? CoalescingPostgresError, .failedInAnotherProcess("upstream down"))
        }
    }

    // Guarantee 33.
    func testAValueTooLargeToPublishReachesItsOwnProcessAndAClearErrorElsewhere() async throws {
        let large = String(repeating: "x", count: 100)
        let standoff = try await standoff("large", configure: { $0.maximumValueBytes = 16 }) { large }
        standoff.gate.release.open()
        let leaderValue = try await standoff.leader.value
        XCTAssertEqual(leaderValue, large)
        do {
            _ = try await standoff.waiting.value
            XCTFail("the waiting process got a value")
        } catch {
            XCTAssertEqual(error as? CoalescingPostgresError, .valueTooLarge(bytes: 102, limit: 16))
        }
        XCTAssertEqual(standoff.pair.first.statistics.valuesTooLarge, 1)
    }

    // Guarantee 35.
    func testCancelActsOnThisProcessOnly() async throws {
        let standoff = try await standoff("cancel")
        XCTAssertTrue(standoff.pair.second.cancel(key: "k"))
        await XCTAssertThrowsCoalescingError(.cancelled, try await standoff.waiting.value)
        standoff.gate.release.open()
        let value = try await standoff.leader.value
        XCTAssertEqual(value, "leader's")
    }
}

/// Keeps every line logged at `minimum` or above, each with its metadata.
struct CapturingLogHandler: LogHandler {
    let lines: LockedBox<[String]>
    var minimum = Logger.Level.error
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        guard event.level >= minimum else { return }
        let fields = (event.metadata ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        lines.mutate { $0.append(([event.message.description] + fields).joined(separator: " ")) }
    }
}
#endif
