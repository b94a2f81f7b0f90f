#if Postgres
import CoalescingPostgres
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import TestSupport
import XCTest

/// The coalescer as a service of swift-service-lifecycle, and the configuration a server hands it.
final class ServiceTests: XCTestCase {
    // Guarantees 30 and 34: a graceful shutdown lets the work this process runs finish and publish.
    func testAGracefulShutdownLetsTheRunningWorkFinishAndServeTheOtherProcess() async throws {
        let configuration = Database.configuration("shutdown")
        let leaving = try PostgresCoalescer<String>(
            url: Database.url(), configuration: configuration, logger: Database.quietLogger)
        let group = ServiceGroup(
            configuration: .init(
                services: [leaving], gracefulShutdownSignals: [], cancellationSignals: [],
                logger: Database.quietLogger))
        let running = Task { try await group.run() }
        let events = FleetEventLog()
        let staying = try runningCoalescer(self, configuration: configuration, observer: events.record)
        let gate = WorkGate()
        let leader = Task {
            try await leaving.value(key: "k") {
                try await gate.pass()
                return "published on the way out"
            }
        }
        try await gate.reached.wait()
        let waiting = Task { try await staying.value(key: "k") { "ran again" } }
        await events.waitUntilWaiting(for: "k")

        await group.triggerGracefulShutdown()
        gate.release.open()
        let leaderValue = try await leader.value
        let waitingValue = try await waiting.value
        try await running.value
        XCTAssertEqual([leaderValue, waitingValue], ["published on the way out", "published on the way out"])
        XCTAssertEqual(staying.statistics.takeOvers, 0)
        // After the shutdown, a step no longer uses the database: it follows the policy.
        let after = try await leaving.value(key: "later") { "ran locally" }
        XCTAssertEqual(after, "ran locally")
        XCTAssertEqual(leaving.statistics.databaseUnavailable, 1)
    }

    // Guarantee 34: a DATABASE_URL says how to connect, TLS included.
    func testADatabaseURLGivesTheClientItsHostUserDatabaseTLSAndApplicationName() throws {
        let plain = try PostgresClient.Configuration(coalescingURL: "postgres://app:s%40cret@db.internal:6432/orders")
        XCTAssertEqual(plain.host, "db.internal")
        XCTAssertEqual(plain.port, 6432)
        XCTAssertEqual(plain.username, "app")
        XCTAssertEqual(plain.password, "s@cret")
        XCTAssertEqual(plain.database, "orders")
        let named = try PostgresClient.Configuration(
            coalescingURL: "postgresql://app@db/orders?sslmode=require&application_name=fleet-1")
        XCTAssertEqual(named.port, 5432)
        XCTAssertEqual(named.options.additionalStartupParameters.map(\.1), ["fleet-1"])
        for wrong in ["mysql://app@db/orders", "postgres://db/orders", "postgres://app@db/orders?sslmode=sometimes"] {
            XCTAssertThrowsError(try PostgresClient.Configuration(coalescingURL: wrong)) {
                guard case .invalidConfiguration? = $0 as? CoalescingPostgresError else { return XCTFail("\($0)") }
            }
        }
        XCTAssertThrowsError(try PostgresCoalescer<String>(url: "postgres://app@db/orders", maximumConnections: 1))
    }
}
#endif
