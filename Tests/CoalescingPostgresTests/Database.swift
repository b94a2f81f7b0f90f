#if Postgres
import CoalescingPostgres
import Foundation
import Logging
import PostgresNIO
import TestSupport
import XCTest

/// The test database: `COALESCING_POSTGRES_URL`, which `.ci/postgres` sets after starting a
/// cluster; without it the tests skip, and `.ci/postgres` fails a run that skipped any.
enum Database {
    static let logger = Logger(label: "CoalescingPostgresTests")
    /// Warnings and above: the tests cut sessions and stop coalescers mid-work on purpose.
    static let quietLogger = {
        var logger = Logger(label: "test")
        logger.logLevel = .error
        return logger
    }()

    static func url() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["COALESCING_POSTGRES_URL"] else {
            throw XCTSkip("COALESCING_POSTGRES_URL is not set: run `bash .ci/postgres start` and export it")
        }
        return url
    }

    /// The URL with another user, for the tests that need a role of their own.
    static func url(user: String) throws -> String {
        var components = try XCTUnwrap(URLComponents(string: url()))
        components.user = user
        return try XCTUnwrap(components.string)
    }

    /// A configuration with a table of its own, so that no test sees another's results or locks.
    static func configuration(_ name: String) -> PostgresCoalescerConfiguration {
        var configuration = PostgresCoalescerConfiguration()
        configuration.table = "t_\(name)_\(UInt32.random(in: 0 ... .max))"
        return configuration
    }

    /// Runs `body` on a connection of the test's own, closed afterwards.
    static func withConnection<Result>(_ body: (PostgresConnection) async throws -> Result) async throws -> Result {
        let configuration = try PostgresClient.Configuration(coalescingURL: url())
        let connection = try await PostgresConnection.connect(
            configuration: .init(
                host: configuration.host ?? "127.0.0.1", port: configuration.port ?? 5432,
                username: configuration.username, password: configuration.password, database: configuration.database,
                tls: .disable),
            id: 1, logger: logger)
        do {
            let result = try await body(connection)
            try await connection.close()
            return result
        } catch {
            if !connection.isClosed { try? await connection.close() }
            throw error
        }
    }

    /// Runs statements on a connection of the test's own.
    static func execute(_ statements: PostgresQuery...) async throws {
        try await withConnection { connection in
            for statement in statements { _ = try await connection.query(statement, logger: logger).collect() }
        }
    }

    /// One integer that a query returns.
    static func integer(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> Int {
        for try await value in try await connection.query(query, logger: logger).decode(Int.self) { return value }
        return 0
    }

    /// How many sessions wait at a one-key advisory lock: the probes' gate (the coalescer's own
    /// locks are only ever tried, never waited for).
    static func gateWaiters(on connection: PostgresConnection) async throws -> Int {
        try await integer(
            "SELECT count(*)::bigint FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND NOT granted",
            on: connection)
    }

    /// Waits, at most `seconds`, until PostgreSQL accepts a connection again.
    static func waitUntilReachable(seconds: Double = 30) async throws {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while true {
            do {
                return try await withConnection { _ in }
            } catch {
                guard ContinuousClock.now < deadline else { throw error }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }
}

/// A coalescer of this test process, running as an app runs it, for as long as the test does.
/// Two of them on one table stand for two processes: each has its own client, session and
/// in-process coalescer, exactly as two processes would.
func runningCoalescer(
    _ test: XCTestCase, configuration: PostgresCoalescerConfiguration, url: String? = nil,
    logger: Logger = Database.quietLogger, observer: (@Sendable (PostgresCoalescingEvent) -> Void)? = nil
) throws -> PostgresCoalescer<String> {
    let coalescer = try PostgresCoalescer<String>(
        url: url ?? Database.url(), configuration: configuration, logger: logger, observer: observer)
    let running = Task { try await coalescer.run() }
    test.addTeardownBlock {
        running.cancel()
        _ = await running.result
    }
    return coalescer
}

/// The events of a Postgres coalescer, cross-process and in-process, kept for a test to wait on and read.
final class FleetEventLog: Sendable {
    private let events = LockedBox<[PostgresCoalescingEvent]>([])

    var all: [PostgresCoalescingEvent] { events.value }

    func record(_ event: PostgresCoalescingEvent) { events.mutate { $0.append(event) } }

    /// How many events of this process's steps waited for another process's run of `key`.
    func waiting(for key: String) -> Int {
        all.filter { if case .waitingForAnotherProcess(key) = $0 { true } else { false } }.count
    }

    /// Waits until this process's in-process coalescer has started work for `key`.
    func waitUntilStarted(_ key: String, file: StaticString = #filePath, line: UInt = #line) async {
        await waitUntil("work for \(key.prefix(40)) started here", file: file, line: line) {
            self.all.contains { if case .local(.workStarted(key, _)) = $0 { true } else { false } }
        }
    }

    /// Waits until a step for `key` waits for another process's run.
    func waitUntilWaiting(for key: String, count: Int = 1, file: StaticString = #filePath, line: UInt = #line) async {
        await waitUntil("a step waits for another process's run of \(key.prefix(40))", file: file, line: line) {
            self.waiting(for: key) >= count
        }
    }
}

/// A gate the work of a test waits at, inside the test process, and tells when the work reached it.
final class WorkGate: Sendable {
    let reached = AsyncGate()
    let release = AsyncGate()

    /// The work: reports that it started, then waits for the test.
    func pass() async throws {
        reached.open()
        try await release.wait()
    }
}
#endif
