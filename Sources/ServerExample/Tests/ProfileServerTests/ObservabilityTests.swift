import InMemoryLogging
import InMemoryTracing
import Logging
import MetricsTestKit
import ProfileServer
import ProfileUpstream
import Tracing
import XCTest

// The server's metrics, logs and traces, through the integrations and each library's own test
// backend: exact counts (Guarantee 21) and events (22) become counters and log records, and the
// load, which runs in a task of its own inheriting no request's context (20), gets a span that is
// a child of the first request's, handed over explicitly, and linked from every request's.
final class ObservabilityTests: XCTestCase {
    /// Hummingbird's tracing middleware starts its spans with the process's tracer: bootstrapped
    /// once for the whole test process.
    private static let tracer: InMemoryTracer = {
        let tracer = InMemoryTracer()
        InstrumentationSystem.bootstrap(tracer)
        return tracer
    }()

    func testABurstWithADisconnectFeedsMetricsLogsAndOneTraceOfTheLoad() async throws {
        let tracer = Self.tracer
        let metrics = TestMetrics()
        let logs = InMemoryLogHandler()
        let observability = Observability(logger: Logger(label: "test") { _ in logs }, metrics: metrics, tracer: tracer)
        let harness = try await ServerHarness.start(
            upstream: ProfileUpstream(holding: true), observability: observability)
        let requests = try await harness.burst(4, of: "/profiles/ada")
        requests[3].cancel()
        try await harness.seen.wait { $0.withdrawn == 1 }
        harness.upstream.release()
        for request in requests[..<3] {
            let answer = try await request.value
            XCTAssertEqual(answer.status, 200)
        }
        try await harness.seen.wait { $0.ended == 1 }

        let profiles = [("coalescer", "profiles")]
        XCTAssertEqual(try metrics.expectCounter("coalescing_work_started_total", profiles).totalValue, 1)
        XCTAssertEqual(try metrics.expectCounter("coalescing_callers_joined_total", profiles).totalValue, 3)
        XCTAssertEqual(
            try metrics.expectCounter("coalescing_callers_withdrawn_total", profiles + [("reason", "withdrawn")])
                .totalValue, 1)
        XCTAssertEqual(try metrics.expectCounter("coalescing_callers_served_total", profiles).totalValue, 3)

        let withdrawal = try XCTUnwrap(logs.entries.first { $0.message == "caller withdrew" })
        XCTAssertEqual(withdrawal.metadata["key"], "ada")
        XCTAssertEqual(withdrawal.metadata["reason"], "withdrawn")

        let spans = tracer.finishedSpans
        let work = try XCTUnwrap(spans.first { $0.operationName == "load profile (work)" })
        let callers = spans.filter { $0.operationName == "load profile" }
            .filter { $0.links.contains { $0.context.inMemorySpanContext?.spanID == work.spanID } }
        XCTAssertEqual(callers.count, 3, "every request served links to the load")
        let starter = try XCTUnwrap(spans.first { $0.spanID == work.parentSpanID })
        XCTAssertEqual(starter.operationName, "load profile")
        // The request's span may still be ending: its client can read the response first.
        let requestKind =
            spans.first { $0.spanID == starter.parentSpanID }?.kind
            ?? tracer.activeSpans.first { $0.spanID == starter.parentSpanID }?.kind
        XCTAssertEqual(requestKind, .server, "the first caller's span is a child of its request's span")
        try await harness.stop()
    }
}
