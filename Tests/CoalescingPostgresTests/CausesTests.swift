#if Postgres
import CoalescingPostgres
import Foundation
import Logging
import PostgresNIO
import TestSupport
import XCTest

/// What the callers and the log are told when the database cannot be had, or refuses what the
/// coalescer asks (Guarantees 32 and 34), read from the driver's fields, never its redacted text.
final class CausesTests: XCTestCase {
    /// The message a caller gets under `.fail` from a coalescer on `url`.
    private func failure(url: String) async throws -> String {
        var configuration = Database.configuration("causes")
        configuration.whenDatabaseUnavailable = .fail
        configuration.connectTimeout = .milliseconds(700)
        let coalescer = try runningCoalescer(self, configuration: configuration, url: url)
        do {
            _ = try await coalescer.value(key: "k") { "ran" }
            XCTFail("a value without a session")
            return ""
        } catch CoalescingPostgresError.databaseUnavailable(let message) {
            XCTAssertFalse(message.contains("Generic description"), message)
            return message
        }
    }

    // Guarantee 34: a refused connection says so.
    func testAPortWhereNothingListensIsARefusedConnection() async throws {
        let message = try await failure(url: "postgres://app@127.0.0.1:1/none")
        XCTAssertTrue(message.contains("refused"), message)
    }

    // Guarantee 34: a listener that never answers is no answer within the time.
    func testAListenerThatNeverAnswersIsNoAnswerWithinTheTimeout() async throws {
        let silent = try SilentListener()
        defer { silent.stop() }
        let message = try await failure(url: "postgres://app@127.0.0.1:\(silent.port)/none")
        XCTAssertTrue(message.contains("no answer"), message)
    }

    // Guarantee 34: a role the server does not let in is an authentication failure, with its SQLSTATE.
    func testARoleTheServerRefusesIsAnAuthenticationFailure() async throws {
        let message = try await failure(url: Database.url(user: "nobody_\(UInt32.random(in: 0 ... .max))"))
        XCTAssertTrue(message.contains("authentication failed (SQLSTATE 28000)"), message)
        XCTAssertTrue(message.contains("does not exist"), "the server's own message: \(message)")
    }

    // Guarantee 34: TLS required of a server that offers none says TLS.
    func testTLSRequiredOfAServerWithoutItSaysTLS() async throws {
        let message = try await failure(url: Database.url() + "?sslmode=require")
        XCTAssertTrue(message.contains("TLS"), message)
    }

    // Guarantee 30: the log of a session that ended under a running leader says why, in words.
    func testASessionTerminatedUnderALeaderIsLoggedWithItsCause() async throws {
        let logged = LockedBox<[String]>([])
        let configuration = Database.configuration("lostlog")
        var named = try XCTUnwrap(URLComponents(string: Database.url()))
        let application = "lostlog-\(UInt32.random(in: 0 ... .max))"
        named.queryItems = [URLQueryItem(name: "application_name", value: application)]
        let coalescer = try runningCoalescer(
            self, configuration: configuration, url: try XCTUnwrap(named.string),
            logger: Logger(label: "test") { _ in CapturingLogHandler(lines: logged, minimum: .notice) })
        let gate = WorkGate()
        let running = Task {
            try await coalescer.value(key: "k") {
                try await gate.pass()
                return "ran"
            }
        }
        try await gate.reached.wait()
        try await Database.execute(
            """
            SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a
            JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' AND l.granted
            WHERE a.application_name = \(application)
            """)
        await waitUntil("the leader logged its lost lock") { logged.value.contains { $0.contains("session ended") } }
        gate.release.open()
        _ = try await running.value
        let line = try XCTUnwrap(logged.value.first { $0.contains("session ended") })
        XCTAssertFalse(line.contains("Generic description"), line)
        XCTAssertTrue(line.contains("57P01") || line.contains("closed"), line)
    }

    // Guarantee 34: with `createsTable` and a role that may not create in its schema, the readiness
    // check names the privilege and what to do instead.
    func testCreatingTheTableWithoutThePrivilegeIsASchemaNotReadyThatSaysWhatToDo() async throws {
        let role = "coalescing_nocreate_\(UInt16.random(in: 0 ... .max))"
        // A schema of the test's own, first on the role's path, where the role may not create:
        // PostgreSQL 15's `public` for any role, on every version.
        try await Database.execute(
            "CREATE ROLE \(unescaped: role) LOGIN", "CREATE SCHEMA \(unescaped: role)",
            "GRANT USAGE ON SCHEMA \(unescaped: role) TO \(unescaped: role)",
            "ALTER ROLE \(unescaped: role) SET search_path = \(unescaped: role)")
        addTeardownBlock {
            try? await Database.execute(
                "DROP SCHEMA IF EXISTS \(unescaped: role) CASCADE", "DROP OWNED BY \(unescaped: role)",
                "DROP ROLE IF EXISTS \(unescaped: role)")
        }
        let app = try runningCoalescer(
            self, configuration: Database.configuration("nocreate"), url: Database.url(user: role))
        do {
            try await app.checkSchema()
            XCTFail("the role may not create the table")
        } catch CoalescingPostgresError.schemaNotReady(let missing) {
            let said = missing.joined(separator: "; ")
            XCTAssertTrue(said.contains("SQLSTATE 42501"), said)
            XCTAssertTrue(said.contains("migrationStatements"), said)
            XCTAssertTrue(said.contains("createsTable = false"), said)
        }
    }

    // Guarantee 34: a readiness check called before the client runs says that this may be why.
    func testTheReadinessCheckBeforeTheClientRunsSaysItMayNotRunYet() async throws {
        var configuration = Database.configuration("early")
        configuration.connectTimeout = .milliseconds(300)
        let client = PostgresClient(
            configuration: try .init(coalescingURL: Database.url()), backgroundLogger: Database.quietLogger)
        let coalescer = try PostgresCoalescer<String>(
            client: client, configuration: configuration, logger: Database.quietLogger)
        do {
            try await coalescer.checkSchema()
            XCTFail("nothing answers before the client runs")
        } catch CoalescingPostgresError.databaseUnavailable(let message) {
            XCTAssertTrue(message.contains("the client does not run yet"), message)
        }
    }

    // Guarantee 34: the readiness probe's answer follows the session.
    func testTheSessionIsReadyOnceItConnectedAndNotAfterItStopped() async throws {
        let coalescer = try PostgresCoalescer<String>(
            url: Database.url(), configuration: Database.configuration("ready"), logger: Database.quietLogger)
        XCTAssertFalse(coalescer.isSessionReady, "before run()")
        let running = Task { try await coalescer.run() }
        _ = try await coalescer.value(key: "k") { "through the database" }
        XCTAssertTrue(coalescer.isSessionReady)
        XCTAssertEqual(coalescer.statistics.runsHere, 1)
        running.cancel()
        try await running.value
        XCTAssertFalse(coalescer.isSessionReady, "after the run ended")
    }
}

/// A TCP listener on loopback that accepts connections into its backlog and never answers: a
/// database host whose server hangs.
final class SilentListener: Sendable {
    let port: Int
    private let descriptor: Int32

    init() throws {
        guard let (descriptor, port) = LoopbackServer.listening(backlog: 16) else { throw POSIXError(.EADDRINUSE) }
        self.descriptor = descriptor
        self.port = port
    }

    func stop() {
        _ = close(descriptor)
    }
}
#endif
