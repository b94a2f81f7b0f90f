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

    static func url() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["COALESCING_POSTGRES_URL"] else {
            throw XCTSkip("COALESCING_POSTGRES_URL is not set: run `bash .ci/postgres start` and export it")
        }
        return url
    }

    /// A configuration with a table of its own, so that no test sees another's results or locks.
    static func configuration(_ name: String) throws -> PostgresCoalescerConfiguration {
        var configuration = try PostgresCoalescerConfiguration(url: url())
        configuration.table = "t_\(name)_\(UInt32.random(in: 0 ... .max))"
        return configuration
    }

    /// Runs `body` on a connection of the test's own, closed afterwards.
    static func withConnection<Result>(_ body: (PostgresConnection) async throws -> Result) async throws -> Result {
        let configuration = try PostgresCoalescerConfiguration(url: url())
        let connection = try await PostgresConnection.connect(
            configuration: configuration.connection, id: 1, logger: logger)
        do {
            let result = try await body(connection)
            try await connection.close()
            return result
        } catch {
            if !connection.isClosed { try? await connection.close() }
            throw error
        }
    }

    /// One integer that a query returns.
    static func integer(_ query: PostgresQuery, on connection: PostgresConnection) async throws -> Int {
        for try await value in try await connection.query(query, logger: logger).decode(Int.self) { return value }
        return 0
    }

    /// How many database steps wait for a key's lock (two-key advisory locks; a gate is a
    /// one-key lock).
    static func stepsWaiting(on connection: PostgresConnection) async throws -> Int {
        try await integer(
            "SELECT count(*)::bigint FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND NOT granted",
            on: connection)
    }

    /// How many sessions wait at a one-key advisory lock: the probes' gate.
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
