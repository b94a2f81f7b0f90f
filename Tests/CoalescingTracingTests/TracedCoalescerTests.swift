#if Tracing
import CoalescingOperations
import CoalescingTracing
import InMemoryTracing
import IntegrationTestSupport
import TestSupport
import Tracing
import XCTest

// The traced coalescers against swift-distributed-tracing's own in-memory tracer. A burst of
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
                try await traced.value(key: "ada", span: "load profile", tracer: tracer, timeout: timeout(index)) {
                    context in
                    try await work()
                    return try body(context)
                }
            }
        }
    }

    func testTheWorkSpanIsAChildOfTheFirstCallerAndEveryCallerLinksToIt() async throws {
        let seen = Observation()
        let traced = TracedCoalescer<String, String>(observer: seen.observer())
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
        XCTAssertEqual(attribute(work.attributes, "coalescing.work"), .int64(1), "the number its events give it (22)")
        XCTAssertEqual(attribute(first.attributes, "coalescing.work"), .int64(1))
        for caller in callers {
            XCTAssertEqual(caller.links.map { $0.context.inMemorySpanContext?.spanID }, [work.spanID])
            let role = caller.spanID == first.spanID ? "started" : "joined"
            XCTAssertEqual(attribute(caller.links[0].attributes, "coalescing.role"), .string(role))
            XCTAssertEqual(caller.events.map(\.name), role == "joined" ? ["coalescing.joined"] : [])
        }
    }

    func testACallerThatTimesOutSaysSoAndTheOthersShareTheWorksError() async throws {
        let seen = Observation()
        let traced = TracedCoalescer<String, String>(observer: seen.observer())
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

    // Every control of the plain coalescer, on the traced one: it is the plain coalescer.

    func testForgetLetsTheNextCallerStartNewWorkWhileTheOldCallersKeepTheirs() async throws {
        // Guarantee 16.
        let seen = Observation()
        let traced = TracedCoalescer<String, String>(observer: seen.observer())
        let (tasks, release) = try await requests(2, through: traced, arrivals: seen.arrivals) { _ in "old" }
        XCTAssertTrue(traced.forget(key: "ada"))
        let fresh = try await traced.value(key: "ada", span: "load profile", tracer: tracer) { _ in "new" }
        release.advance()
        for task in tasks {
            let old = try await task.value
            XCTAssertEqual(old, "old")
        }
        XCTAssertEqual(fresh, "new")
        XCTAssertEqual(traced.statistics.workStarted, 2)
    }

    func testCancellingTheKeyOrEverythingSettlesTracedCallersWithCancelledAndSaysSoOnTheirSpans() async throws {
        // Guarantee 13, for cancel(key:) and cancelAll().
        for cancelAll in [false, true] {
            let seen = Observation()
            let traced = TracedCoalescer<String, String>(observer: seen.observer())
            let (tasks, _) = try await requests(2, through: traced, arrivals: seen.arrivals) { _ in "never" }
            XCTAssertTrue(cancelAll ? traced.cancelAll() : traced.cancel(key: "ada"))
            for task in tasks {
                let error = await XCTAssertThrowsErrorAsync(try await task.value)
                XCTAssertEqual(error as? CoalescingError, .cancelled, "cancelAll: \(cancelAll)")
            }
            try await seen.ended.wait()
            XCTAssertEqual(traced.statistics.workCancelled, 1)
        }
        let left = tracer.finishedSpans.filter { $0.operationName == "load profile" }
        XCTAssertEqual(left.count, 4)
        for span in left {
            XCTAssertEqual(span.events.last?.name, "coalescing.left")
            XCTAssertEqual(attribute(span.events.last!.attributes, "coalescing.reason"), .string("cancelled"))
        }
    }

    func testProgressPriorityAndTheTaskNameReachTheWorkAsOnThePlainCoalescer() async throws {
        // Guarantees 19 (the starting priority), 20 and 24 (progress, then the result).
        let traced = TracedCoalescer<String, TaskPriority>()
        let received = LockedBox<[WorkProgress]>([])
        let priority = try await traced.value(
            key: "ada", span: "load profile", tracer: tracer, priority: .high, name: "load ada",
            progress: { progress in received.mutate { $0.append(progress) } }
        ) { _ in
            ProgressReporter.current.report(progress: WorkProgress(completed: 1, total: 2))
            return Task.currentPriority
        }
        XCTAssertEqual(priority, .high)
        XCTAssertEqual(received.value, [WorkProgress(completed: 1, total: 2)])
    }

    func testAStallIsReportedToTheObserverWithTheWorksNumber() async throws {
        // Guarantee 23.
        let stalled = Threshold()
        let numbers = LockedBox<[Int]>([])
        let traced = TracedCoalescer<String, String>(
            observer: { event in
                if case .workStalled(_, let work, _, _) = event {
                    numbers.mutate { $0.append(work) }
                    stalled.advance()
                }
            }, stallThreshold: .milliseconds(1))
        let release = Threshold()
        let caller = Task { [tracer] in
            try await traced.value(key: "ada", span: "load profile", tracer: tracer) { _ in
                try await release.wait()
                return "late"
            }
        }
        try await stalled.wait()
        release.advance()
        let late = try await caller.value
        XCTAssertEqual(late, "late")
        XCTAssertEqual(numbers.value, [1])
    }

    func testAConsumerTakingAPrefetchedResultLinksToThePrefetchsWorkSpan() async throws {
        // Guarantee 15.
        let traced = TracedPrefetchableCoalescer<String, String>(prefetchTimeout: .seconds(60))
        try await traced.prefetch(key: "feed", span: "prefetch feed", tracer: tracer) { _ in "explore" }
        let feed = try await traced.value(key: "feed", span: "show feed", tracer: tracer) { _ in "fresh" }

        XCTAssertEqual(feed, "explore", "the consumer took the stored result")
        let work = try span("prefetch feed (work)")
        XCTAssertEqual(work.parentSpanID, try span("prefetch feed").spanID)
        let consumer = try span("show feed")
        XCTAssertEqual(consumer.links.map { $0.context.inMemorySpanContext?.spanID }, [work.spanID])
        XCTAssertEqual(attribute(consumer.links[0].attributes, "coalescing.role"), .string("joined"))
        XCTAssertEqual(traced.statistics.workStarted, 1)
    }
}
#endif
