#if Postgres && Metrics
import CoalescingPostgres
import Metrics
import MetricsTestKit
import XCTest

/// The swift-metrics counters of the cross-process outcomes, with the Metrics trait.
final class MetricsTests: XCTestCase {
    // Guarantee 35.
    func testTheMetricsCountRunsServedFromAnotherInstanceAndTheDatabasesAbsence() throws {
        let metrics = TestMetrics()
        let recorder = PostgresCoalescingMetrics(factory: metrics, dimensions: [("coalescer", "quotes")])
        recorder.record(.ranHere(key: "k", tookOver: false))
        recorder.record(.ranHere(key: "k", tookOver: true))
        recorder.record(.servedFromAnotherProcess(key: "k", waited: .milliseconds(7)))
        recorder.record(.databaseUnavailable(key: "k", error: "refused"))

        let served = try metrics.expectCounter(
            "coalescing_postgres_served_from_another_instance_total", [("coalescer", "quotes")])
        XCTAssertEqual(served.totalValue, 1)
        let tookOver = try metrics.expectCounter(
            "coalescing_postgres_runs_total", [("coalescer", "quotes"), ("took_over", "true")])
        XCTAssertEqual(tookOver.totalValue, 1)
        let unavailable = try metrics.expectCounter(
            "coalescing_postgres_database_unavailable_total", [("coalescer", "quotes")])
        XCTAssertEqual(unavailable.totalValue, 1)
        let wait = try metrics.expectTimer("coalescing_postgres_join_wait_seconds", [("coalescer", "quotes")])
        XCTAssertEqual(wait.values, [7_000_000])
    }
}
#endif
