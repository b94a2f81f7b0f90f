#if AsyncHTTPClient
import AsyncHTTPClient
import CoalescingAsyncHTTPClient
import CoalescingHTTP
import CoalescingOperations
import TestSupport
import XCTest

#if Metrics
import CoalescingMetrics
import MetricsTestKit
#endif
#if Logging
import CoalescingLogging
import InMemoryLogging
import Logging
#endif
#if Tracing
import InMemoryTracing
import Tracing
#endif

// The client's events feed the bridges as a task coalescer's do (Guarantee 22): ten callers of
// one request are one work in swift-metrics' counters and one record per work in swift-log; its
// span in AsyncHTTPClient's tracing is a child of the span of the caller that sent it.
final class BridgeTests: ServerTestCase {
    /// Ten callers of one request, held until the nine others joined.
    private func tenCallers(through http: CoalescingHTTPClient) async throws {
        let request = HTTPClientRequest(url: server.url + "/hold")
        let tasks = (0..<10).map { _ in Task { try await http.execute(request) } }
        await waitUntil("nine callers joined") { http.statistics.callersJoined == 9 }
        server.hold.open()
        for task in tasks { _ = try await task.value }
    }

    #if Metrics
    /// Guarantee 22: the metrics bridge counts one work and ten callers for ten callers of one
    /// request.
    func testMetricsCountOneWorkForTenCallers() async throws {
        let metrics = TestMetrics()
        let bridge = CoalescingMetrics(coalescer: "http", factory: metrics)
        let http = CoalescingHTTPClient(client: client, observer: bridge.record)
        try await tenCallers(through: http)
        let dimensions = [("coalescer", "http")]
        func total(_ label: String, _ extra: [(String, String)] = []) -> Int64? {
            try? metrics.expectCounter(label, dimensions + extra).totalValue
        }
        await waitUntil("the work's end is counted") {
            total("coalescing_work_ended_total", [("outcome", "succeeded")]) == 1
        }
        XCTAssertEqual(total("coalescing_work_started_total"), 1)
        XCTAssertEqual(total("coalescing_callers_joined_total"), 9)
        XCTAssertEqual(total("coalescing_callers_served_total"), 10)
        XCTAssertEqual(server.requests("/hold"), 1)
    }
    #endif

    #if Logging
    /// Guarantee 22: the logging bridge records the request's end once, with its key, which names
    /// no header value.
    func testLoggingRecordsOneEndForTenCallers() async throws {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "server") { _ in handler }
        logger.logLevel = .debug
        let bridge = CoalescingLogging(coalescer: "http", logger: logger)
        let http = CoalescingHTTPClient(client: client, observer: bridge.record)
        try await tenCallers(through: http)
        let ended = { handler.entries.filter { $0.message.description == "coalesced work ended" } }
        await waitUntil("the work's end is logged") { ended().count == 1 }
        let metadata = try XCTUnwrap(ended().first).metadata.mapValues(\.description)
        XCTAssertEqual(metadata["key"], "GET \(server.url)/hold")
        XCTAssertEqual(metadata["callers_served"], "10")
        XCTAssertEqual(metadata["coalescer"], "http")
    }
    #endif

    #if Tracing
    /// Guarantee 20: the request runs in the context of the caller that sent it, so that
    /// AsyncHTTPClient's span of the one request is a child of that caller's span.
    func testTheRequestSpanIsAChildOfTheSendersSpan() async throws {
        let tracer = InMemoryTracer()
        var configuration = HTTPClient.Configuration()
        configuration.tracing.tracer = tracer
        let traced = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        let http = CoalescingHTTPClient(client: traced)
        let request = HTTPClientRequest(url: server.url + "/hold")
        let first = Task { try await tracer.withSpan("caller 0") { _ in try await http.execute(request) } }
        await waitUntil("the request is sent") { server.requests("/hold") == 1 }
        let second = Task { try await tracer.withSpan("caller 1") { _ in try await http.execute(request) } }
        await waitUntil("the second caller joined") { http.statistics.callersJoined == 1 }
        server.hold.open()
        _ = try await (first.value, second.value)
        try await traced.shutdown()
        let requests = tracer.finishedSpans.filter { $0.operationName == "GET" }
        XCTAssertEqual(requests.count, 1)
        let sender = try XCTUnwrap(tracer.finishedSpans.first { $0.operationName == "caller 0" })
        XCTAssertEqual(requests.first?.parentSpanID, sender.spanID)
        XCTAssertEqual(requests.first?.traceID, sender.traceID)
    }
    #endif
}
#endif
