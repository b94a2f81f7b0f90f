#if Metrics
import CoalescingMetrics
import CoalescingOperations
import IntegrationTestSupport
import MetricsTestKit
import XCTest

// The swift-metrics bridge against swift-metrics' own test backend: the counters, meter and timer
// follow the events of Guarantee 22 for a burst that coalesces (1, 12), a caller withdrawn (14)
// and one timed out (17), work cancelled when its last caller leaves (18), and a stall report (23).
final class CoalescingMetricsTests: XCTestCase {
    private let metrics = TestMetrics()
    private let dimensions = [("coalescer", "profiles")]

    private func total(_ label: String, _ extra: [(String, String)] = []) throws -> Int64 {
        try metrics.expectCounter(label, dimensions + extra).totalValue
    }

    func testABurstCountsOneWorkAndEveryCallerAsItLeaves() async throws {
        let bridge = CoalescingMetrics(coalescer: "profiles", factory: metrics)
        let seen = Observation()
        let coalescer = InFlightTaskCoalescer<String, Int>(observer: seen.observer(bridge.record))

        let tasks = try await seen.burstWithTwoCallersLeaving(of: 4, through: coalescer) { 42 }
        for index in [0, 3] {
            let value = try await tasks[index].value
            XCTAssertEqual(value, 42)
        }
        try await seen.ended.wait()

        XCTAssertEqual(try total("coalescing_work_started_total"), 1)
        XCTAssertEqual(try total("coalescing_callers_joined_total"), 3)
        XCTAssertEqual(try total("coalescing_callers_withdrawn_total", [("reason", "withdrawn")]), 1)
        XCTAssertEqual(try total("coalescing_callers_withdrawn_total", [("reason", "timed_out")]), 1)
        XCTAssertEqual(try total("coalescing_callers_served_total"), 2)
        XCTAssertEqual(try total("coalescing_work_ended_total", [("outcome", "succeeded")]), 1)
        XCTAssertEqual(
            try metrics.expectTimer("coalescing_work_duration", dimensions + [("outcome", "succeeded")]).values.count, 1
        )
        XCTAssertEqual(try metrics.expectMeter("coalescing_work_in_flight", dimensions).lastValue, 0)
        XCTAssertEqual(
            Int64(coalescer.statistics.callersJoined), try total("coalescing_callers_joined_total"),
            "runs saved are the callers that joined (Guarantee 21)")
    }

    func testWorkAbandonedByItsOnlyCallerEndsCancelled() async throws {
        let bridge = CoalescingMetrics(coalescer: "profiles", factory: metrics)
        let seen = Observation()
        let coalescer = InFlightTaskCoalescer<String, Int>(observer: seen.observer(bridge.record))
        let (tasks, _) = try await burst(of: 1, arrivals: seen.arrivals) { _, work in
            try await coalescer.value(key: "ada") {
                try await work()
                return 42
            }
        }
        tasks[0].cancel()
        try await seen.ended.wait()
        await XCTAssertThrowsErrorAsync(try await tasks[0].value)

        XCTAssertEqual(try total("coalescing_callers_withdrawn_total", [("reason", "withdrawn")]), 1)
        XCTAssertEqual(try total("coalescing_work_ended_total", [("outcome", "cancelled")]), 1)
        XCTAssertEqual(try metrics.expectMeter("coalescing_work_in_flight", dimensions).lastValue, 0)
    }

    func testAStallReportIsCounted() throws {
        let bridge = CoalescingMetrics(coalescer: "profiles", factory: metrics)
        bridge.record(CoalescingEvent<String>.workStalled(key: "ada", work: 1, callers: 2, elapsed: .seconds(30)))
        XCTAssertEqual(try total("coalescing_work_stalled_total"), 1)
    }
}
#endif
