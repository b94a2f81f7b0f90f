#if Postgres
import CoalescingPostgres
import Foundation
import Logging
import PostgresNIO
import TestSupport
import XCTest

/// What counts as a take-over, what is logged for one, and what is not taken over (Guarantee 30).
final class TakeOverTests: XCTestCase {
    // Guarantee 30: a run that replaces one that ended without a result is a take-over, counted
    // and logged once, though the step heard, before it last asked, a release that said an earlier
    // run published (one that ended between this run's predecessor's result and its release).
    func testATakeOverIsCountedAndLoggedOnceThoughAnEarlierRunsPublishedReleaseWasHeard() async throws {
        let configuration = Database.configuration("takeover")
        let table = configuration.table
        let logged = LockedBox<[String]>([])
        let events = FleetEventLog()
        let coalescer = try runningCoalescer(
            self, configuration: configuration,
            logger: Logger(label: "test") { _ in CapturingLogHandler(lines: logged, minimum: .notice) },
            observer: events.record)
        try await coalescer.checkSchema()
        let lock = lockKey(table: table, key: "report")
        // The other process's leader: a session of the test's own that holds the key's lock.
        let leader = try await Database.connection()
        _ = try await leader.query("SELECT pg_advisory_lock(\(lock))", logger: Database.logger).collect()
        let waiting = Task { try await coalescer.value(key: "report") { "taken over" } }
        await events.waitUntilWaiting(for: "report")
        let asked = try await Database.integer("SELECT last_value FROM \(unescaped: "\"\(table)_seq\"")", on: leader)

        // What a step hears when a run before ends between its result and its release: the
        // release alone. The step asks again, and is refused: the run it waits for goes on.
        _ = try await leader.query(
            "SELECT pg_notify(\(table), \("\(lock) released published"))", logger: Database.logger
        ).collect()
        try await Database.withConnection { observer in
            await waitUntil("the step asked again (each request takes the sequence's next value)") {
                let now =
                    (try? await Database.integer(
                        "SELECT last_value FROM \(unescaped: "\"\(table)_seq\"")", on: observer)) ?? 0
                return now > asked
            }
        }
        // The leader dies: its session ends, and the lock with it, without a word.
        try await leader.close()

        let value = try await waiting.value
        XCTAssertEqual(value, "taken over")
        XCTAssertEqual(coalescer.statistics.takeOvers, 1, "\(coalescer.statistics)")
        XCTAssertEqual(
            events.all.filter { if case .ranHere("report", tookOver: true) = $0 { true } else { false } }.count, 1)
        let notices = logged.value.filter { $0.contains("took over") }
        XCTAssertEqual(notices.count, 1, "one notice per take-over: \(logged.value)")
    }

    // Guarantee 30: a leader whose process is stopped, not dead, keeps its session and its lock:
    // no process takes over while it is stopped; once it resumes, it publishes for every process.
    func testAStoppedLeaderIsNotTakenOverAndServesEveryProcessOnceResumed() async throws {
        let table = Database.configuration("stopped").table
        let fleet = try ProbeFleet()
        let gate = try await FleetGate.hold()
        try fleet.start(3, key: "report:stopped", table: table, gate: gate.key)
        try await fleet.waitForBurst(waiting: 2, runs: 1)
        let leader = try XCTUnwrap(fleet.runs.first)

        XCTAssertEqual(kill(leader, SIGSTOP), 0)
        // The stop itself, not a wait for something: four take-over checks of each waiting process.
        try await Task.sleep(for: .seconds(2))
        XCTAssertEqual(fleet.runs.count, 1, "nobody took over from a stopped leader")
        XCTAssertEqual(kill(leader, SIGCONT), 0)
        await gate.open()
        await fleet.waitForAll(seconds: 30)

        XCTAssertEqual(fleet.runs.count, 1, "the stopped leader's run, once")
        XCTAssertEqual(fleet.answers, Array(repeating: "value: value of report:stopped", count: 3))
        XCTAssertEqual(fleet.lines.filter { $0.contains { $0.contains("takeOvers 0") } }.count, 3)
    }
}

/// A key's advisory lock as the coalescer computes it: 64 bits of FNV-1a over the table's name,
/// a 0xFF byte and the key's bytes.
func lockKey(table: String, key: String) -> Int64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in table.utf8 + [0xFF] + key.utf8 {
        hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
    }
    return Int64(bitPattern: hash)
}

extension Database {
    /// A connection of the test's own, which the test closes: a session that can die mid-test.
    static func connection(user: String? = nil) async throws -> PostgresConnection {
        let configuration = try PostgresClient.Configuration(coalescingURL: user.map(url(user:)) ?? url())
        return try await PostgresConnection.connect(
            configuration: .init(
                host: configuration.host ?? "127.0.0.1", port: configuration.port ?? 5432,
                username: configuration.username, password: configuration.password, database: configuration.database,
                tls: .disable),
            id: 3, logger: logger)
    }
}
#endif
