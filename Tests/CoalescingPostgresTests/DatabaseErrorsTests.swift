#if Postgres
import CoalescingOperations
import CoalescingPostgres
import Foundation
import Logging
import PostgresNIO
import TestSupport
import XCTest

/// What reaches the callers when the database is out of reach, and when it answers with an error.
final class DatabaseErrorsTests: XCTestCase {
    // Guarantee 34.
    func testAnUnreachableDatabaseRunsTheWorkLocallyOrFailsClearlyAndLogsOnce() async throws {
        let logged = LockedBox<[String]>([])
        var configuration = Database.configuration("unreachable")
        configuration.connectTimeout = .milliseconds(500)
        let events = FleetEventLog()
        let unreachable = "postgres://nobody@127.0.0.1:1/none"
        let local = try runningCoalescer(
            self, configuration: configuration, url: unreachable,
            logger: Logger(label: "test") { _ in CapturingLogHandler(lines: logged) }, observer: events.record)
        for _ in 1...3 {
            let value = try await local.value(key: "k") { "local" }
            XCTAssertEqual(value, "local")
        }
        XCTAssertEqual(local.statistics.databaseUnavailable, 3)
        XCTAssertEqual(local.statistics.ranWithoutDatabase, 3)
        XCTAssertEqual(logged.value.count, 1, "logged once: \(logged.value)")
        XCTAssertEqual(events.all.filter { if case .databaseUnavailable = $0 { true } else { false } }.count, 3)

        configuration.whenDatabaseUnavailable = .fail
        let failingEvents = FleetEventLog()
        let failing = try runningCoalescer(
            self, configuration: configuration, url: unreachable, observer: failingEvents.record)
        for key in ["a", "b", "c"] {
            do {
                _ = try await failing.value(key: key) { "local" }
                XCTFail("a value without the database")
            } catch CoalescingPostgresError.databaseUnavailable(let message) {
                XCTAssertFalse(
                    message.contains("Generic description"), "the cause, not the driver's redacted text: \(message)")
                XCTAssertTrue(message.contains("session"), message)
            }
        }
        // What a logging bridge fed from the observer logs: the outage once (the coalescer's own
        // log), not once more per failed step.
        let failures = failingEvents.all.filter {
            if case .local(.workEnded(_, _, .failed, _, _, _)) = $0 { true } else { false }
        }
        XCTAssertEqual(failures.count, 3)
        XCTAssertTrue(failures.allSatisfy(\.repeatsAnOutage))
    }

    // Guarantees 32 and 34: an error of the database is not an outage.
    func testAForgottenMigrationIsADatabaseErrorForTheCallersNotAnOutage() async throws {
        var configuration = Database.configuration("missing")
        configuration.createsTable = false
        let events = FleetEventLog()
        let coalescer = try runningCoalescer(self, configuration: configuration, observer: events.record)
        for _ in 1...2 {
            do {
                _ = try await coalescer.value(key: "k") { "ran" }
                XCTFail("a value without the table")
            } catch CoalescingPostgresError.databaseError(let sqlState, let message) {
                XCTAssertEqual(sqlState, "42P01", message)
                XCTAssertTrue(message.contains("\(configuration.table)_seq"), "the server's own message: \(message)")
            }
        }
        XCTAssertEqual(coalescer.statistics.databaseErrors, 2)
        XCTAssertEqual(coalescer.statistics.databaseUnavailable, 0, "not an outage: nothing ran without the database")
        XCTAssertEqual(events.all.filter { if case .databaseError = $0 { true } else { false } }.count, 2)
        do {
            try await coalescer.checkSchema()
            XCTFail("the schema is not there")
        } catch CoalescingPostgresError.schemaNotReady(let missing) {
            XCTAssertEqual(missing.count, 2, "\(missing)")
            XCTAssertTrue(missing[0].contains(configuration.table), "\(missing)")
        }
    }

    // Guarantee 34: the readiness check names what a role lacks, and the migration's statements fix it.
    func testTheReadinessCheckNamesMissingPrivilegesAndTheMigrationsStatementsGrantThem() async throws {
        let role = "coalescing_app_\(UInt16.random(in: 0 ... .max))"
        var configuration = Database.configuration("grants")
        configuration.createsTable = false
        try await Database.execute("CREATE ROLE \(unescaped: role) LOGIN")
        addTeardownBlock {
            try? await Database.execute(
                "DROP OWNED BY \(unescaped: role)", "DROP ROLE IF EXISTS \(unescaped: role)")
        }
        try await Database.withConnection { connection in
            for statement in configuration.migrationStatements {
                _ = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: Database.logger).collect()
            }
        }
        let app = try runningCoalescer(self, configuration: configuration, url: Database.url(user: role))
        do {
            try await app.checkSchema()
            XCTFail("the role has no privilege yet")
        } catch CoalescingPostgresError.schemaNotReady(let missing) {
            XCTAssertEqual(missing.count, 2, "\(missing)")
            XCTAssertTrue(missing[0].hasPrefix("SELECT, INSERT, UPDATE, DELETE"), "\(missing)")
        }
        try await Database.withConnection { connection in
            for statement in configuration.grantStatements(to: role) {
                _ = try await connection.query(PostgresQuery(unsafeSQL: statement), logger: Database.logger).collect()
            }
        }
        try await app.checkSchema()
        let value = try await app.value(key: "k") { "granted" }
        XCTAssertEqual(value, "granted")
    }
}
#endif
