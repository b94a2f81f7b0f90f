import CoalescingOperations
import CoalescingTracing
import InMemoryTracing
import IntegrationTestSupport
import Tracing
import XCTest

// The tracing wrapper against swift-distributed-tracing's own in-memory tracer. A burst of
// requests runs one piece of work (Guarantees 1 and 12) in a task that inherits no caller's
// context (20): its span is a child of the first caller's span, handed over explicitly, and runs
// as the work's `ServiceContext.current`; every caller's span links to it. A caller that times out
// (17) says so on its span; the work's error reaches every caller as thrown (2).
final class TracedCoalescerTests: XCTestCase {
    private struct Unavailable: Error {}

    private let tracer = InMemoryTracer()

    private func span(_ name: String) throws -> FinishedInMemorySpan {
        try XCTUnwrap(tracer.finishedSpans.first { $0.operationName == name }, name)
    }

    private func attribute(_ attributes: SpanAttributes, _ name: String) -> SpanAttribute? {
        attributes[name]?.toSpanAttribute()
    }

    /// Starts `callers` requests, each in a span of its own, that call `traced` with `key`; the
    /// work, started by request 0, waits for the release, then runs `body` in the work's context.
    private func requests(
        _ callers: Int, through traced: TracedCoalescer<String, String>, arrivals: Threshold,
        timeout: @escaping @Sendable (Int) -> Duration? = { _ in nil },
        body: @escaping @Sendable (ServiceContext) throws -> String
    ) async throws -> (tasks: [Task<String, any Error>], release: Threshold) {
        try await burst(of: callers, arrivals: arrivals) { [tracer] index, work in
            try await tracer.withSpan("request \(index)") { _ in
                try await traced.value(key: "ada", timeout: timeout(index)) { context in
                    try await work()
                    return try body(context)
                }
            }
        }
    }

    func testTheWorkSpanIsAChildOfTheFirstCallerAndEveryCallerLinksToIt() async throws {
        let seen = Observation()
        let traced = TracedCoalescer<String, String>(name: "load profile", tracer: tracer, observer: seen.observer())
        let (tasks, release) = try await requests(3, through: traced, arrivals: seen.arrivals) { context in
            XCTAssertEqual(ServiceContext.current?.inMemorySpanContext, context.inMemorySpanContext)
            return context.inMemorySpanContext?.spanID ?? "none"
        }
        release.advance()
        var answers: [String] = []
        for task in tasks { answers.append(try await task.value) }

        let work = try span("load profile (work)")
        XCTAssertEqual(Set(answers), [work.spanID], "every caller got the one answer, computed in the work's span")
        let callers = tracer.finishedSpans.filter { $0.operationName == "load profile" }
        XCTAssertEqual(callers.count, 3)
        let first = try XCTUnwrap(callers.first { $0.parentSpanID == (try? span("request 0").spanID) })
        XCTAssertEqual(work.parentSpanID, first.spanID)
        XCTAssertEqual(work.traceID, first.traceID)
        for caller in callers {
            XCTAssertEqual(caller.links.map { $0.context.inMemorySpanContext?.spanID }, [work.spanID])
            let role = caller.spanID == first.spanID ? "started" : "joined"
            XCTAssertEqual(attribute(caller.links[0].attributes, "coalescing.role"), .string(role))
            XCTAssertEqual(caller.events.map(\.name), role == "joined" ? ["coalescing.joined"] : [])
        }
    }

    func testACallerThatTimesOutSaysSoAndTheOthersShareTheWorksError() async throws {
        let seen = Observation()
        let traced = TracedCoalescer<String, String>(name: "load profile", tracer: tracer, observer: seen.observer())
        let (tasks, release) = try await requests(
            2, through: traced, arrivals: seen.arrivals, timeout: { $0 == 1 ? .milliseconds(1) : nil }
        ) { _ in throw Unavailable() }
        try await seen.withdrawals.wait()
        release.advance()
        let failure = await XCTAssertThrowsErrorAsync(try await tasks[0].value)
        XCTAssertTrue(failure is Unavailable)
        let timeout = await XCTAssertThrowsErrorAsync(try await tasks[1].value)
        XCTAssertEqual(timeout as? CoalescingError, .timedOut)
        try await seen.ended.wait()

        let work = try span("load profile (work)")
        XCTAssertEqual(work.errors.count, 1)
        let callers = tracer.finishedSpans.filter { $0.operationName == "load profile" }
        let starter = try XCTUnwrap(callers.first { !$0.links.isEmpty })
        XCTAssertEqual(starter.links.map { $0.context.inMemorySpanContext?.spanID }, [work.spanID])
        XCTAssertTrue(starter.errors.first?.error is Unavailable)
        let leaver = try XCTUnwrap(callers.first { $0.links.isEmpty })
        XCTAssertEqual(leaver.events.map(\.name), ["coalescing.left"])
        XCTAssertEqual(attribute(leaver.events[0].attributes, "coalescing.reason"), .string("timed_out"))
        XCTAssertEqual(traced.statistics.workFailed, 1, "the work's error is counted as a failure, not a cancellation")
    }
}
