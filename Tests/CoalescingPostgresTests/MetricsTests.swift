#if Postgres && Metrics
import CoalescingPostgres
import Metrics
import MetricsTestKit
import XCTest

/// The swift-metrics counters of the cross-process outcomes, with the Metrics trait.
final class MetricsTests: XCTestCase {
    // Guarantee 35.
    func testEveryMetricOfTheArticleCountsItsEvent() throws {
        let metrics = TestMetrics()
        let recorder = PostgresCoalescingMetrics(factory: metrics, dimensions: [("coalescer", "quotes")])
        recorder.record(.ranHere(key: "k", tookOver: false))
        recorder.record(.ranHere(key: "k", tookOver: true))
        recorder.record(.servedFromAnotherProcess(key: "k", waited: .milliseconds(7)))
        recorder.record(.databaseUnavailable(key: "k", error: "refused"))
        recorder.record(.databaseError(key: "k", error: .databaseError(sqlState: "42P01", message: "no table")))
        recorder.record(.lockLost(key: "k", error: .databaseUnavailable("terminated")))
        recorder.record(.failedInAnotherProcess(key: "k", error: .failedInAnotherProcess("upstream down")))
        recorder.record(.publishFailed(key: "k", error: "closed"))
        recorder.record(.waitingForAnotherProcess(key: "k"))

        let served = try metrics.expectCounter(
            "coalescing_postgres_served_from_another_instance_total", [("coalescer", "quotes")])
        XCTAssertEqual(served.totalValue, 1)
        let tookOver = try metrics.expectCounter(
            "coalescing_postgres_runs_total", [("coalescer", "quotes"), ("took_over", "true")])
        XCTAssertEqual(tookOver.totalValue, 1)
        let unavailable = try metrics.expectCounter(
            "coalescing_postgres_database_unavailable_total", [("coalescer", "quotes")])
        XCTAssertEqual(unavailable.totalValue, 1)
        for name in [
            "coalescing_postgres_database_errors_total", "coalescing_postgres_locks_lost_total",
            "coalescing_postgres_failures_from_another_instance_total", "coalescing_postgres_publish_failures_total",
        ] {
            XCTAssertEqual(try metrics.expectCounter(name, [("coalescer", "quotes")]).totalValue, 1, name)
        }
        let ran = try metrics.expectCounter(
            "coalescing_postgres_runs_total", [("coalescer", "quotes"), ("took_over", "false")])
        XCTAssertEqual(ran.totalValue, 1)
        let wait = try metrics.expectTimer("coalescing_postgres_join_wait_seconds", [("coalescer", "quotes")])
        XCTAssertEqual(wait.values, [7_000_000])
    }
}
#endif
