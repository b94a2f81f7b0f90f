import Foundation
import TestSupport
import XCTest

@testable import CoalescingOperations

/// What the task coalescers let an app see: Guarantee 21 (statistics are exact) and Guarantee 22
/// (events arrive in order, with no lock held; the observer may call back; it is released with
/// its coalescer). See the Guarantees article.
final class TaskCoalescerObservationTests: XCTestCase {
    struct WorkFailed: Error {}

    /// Records the events an observer receives.
    /// Holds an object until nothing else does, so a test can see when it was released.
    final class Witness: Sendable {}

    // MARK: Guarantee 21: statistics are exact

    func testStatisticsCountEveryCallerAndEveryEnd() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let gate = AsyncGate()
        let work: @Sendable () async throws -> Int = {
            try await gate.wait()
            return 1
        }
        let served = Task { try await coalescer.value(key: "a", operation: work) }
        await waitUntil("the work started") { coalescer.callerCount(for: "a") == 1 }
        let withdrawn = Task { try await coalescer.value(key: "a", operation: work) }
        let timedOut = Task { try await coalescer.value(key: "a", timeout: .milliseconds(5), operation: work) }
        await waitUntil("two callers joined") { coalescer.statistics.callersJoined == 2 }
        withdrawn.cancel()
        _ = await [withdrawn.result, timedOut.result]
        gate.open()
        _ = try await served.value
        do {
            _ = try await coalescer.value(key: "b") { throw WorkFailed() }
        } catch {}
        let cancelled = (0..<2).map { _ in
            Task {
                try await coalescer.value(key: "c") {
                    try await AsyncGate().wait()
                    return 0
                }
            }
        }
        await waitUntil("both callers of c wait") { coalescer.callerCount(for: "c") == 2 }
        coalescer.cancel(key: "c")
        for caller in cancelled {
            await XCTAssertThrowsCoalescingError(.cancelled, try await caller.value)
        }

        var expected = CoalescingStatistics()
        expected.workStarted = 3
        expected.callersArrived = 6
        expected.callersJoined = 3
        expected.callersWithdrawn = 1
        expected.callersTimedOut = 1
        expected.callersServed = 4
        expected.workSucceeded = 1
        expected.workFailed = 1
        expected.workCancelled = 1
        XCTAssertEqual(coalescer.statistics, expected, "\(coalescer.statistics)")
        XCTAssertEqual(coalescer.statistics.workInFlight, 0)
        XCTAssertEqual(
            coalescer.statistics.callersJoined, 3, "each caller that joined spared a run, served or not")
    }

    func testAConsumerTakingAPrefetchedResultCountsAsACallerServedByThePrefetch() async throws {
        let coalescer = PrefetchableTaskCoalescer<String, Int>(prefetchTimeout: .seconds(30))
        try await coalescer.prefetch(key: "feed") { 1 }
        try await coalescer.prefetch(key: "feed") { 2 }  // a result is waiting: not a caller
        _ = try await coalescer.value(key: "feed") { 3 }

        let statistics = coalescer.statistics
        XCTAssertEqual(statistics.workStarted, 1)
        XCTAssertEqual(statistics.callersJoined, 1)
        XCTAssertEqual(statistics.callersServed, 2)
        XCTAssertEqual(statistics.callersJoined, 1, "the consumer was spared a run")
    }

    func testStatisticsAreExactUnderConcurrentCallers() async throws {
        let coalescer = InFlightTaskCoalescer<Int, Int>()
        let gate = AsyncGate()
        let callers = 2_000
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<callers {
                group.addTask {
                    let caller = Task {
                        try await coalescer.value(key: index % 4) {
                            try await gate.wait()
                            return 1
                        }
                    }
                    if index % 3 == 0 {
                        caller.cancel()
                    }
                    _ = await caller.result
                }
            }
            // Holds the work until at least as many callers arrived as were not cancelled; the
            // figures must add up whichever callers arrive later and start new work.
            await waitUntil("the callers arrived") {
                let statistics = coalescer.statistics
                return statistics.workStarted + statistics.callersJoined >= callers - (callers + 2) / 3
            }
            gate.open()
        }
        await waitUntil("all work ended") { coalescer.statistics.workInFlight == 0 }

        let statistics = coalescer.statistics
        let arrived = statistics.workStarted + statistics.callersJoined
        XCTAssertEqual(arrived, statistics.callersServed + statistics.callersWithdrawn, "\(statistics)")
        XCTAssertEqual(statistics.workEnded, statistics.workStarted)
        XCTAssertEqual(statistics.callersTimedOut, 0)
        XCTAssertEqual(statistics.workFailed, 0)
    }

    // MARK: Guarantee 22: events

    /// A consumer that takes a stored value is one of its work's callers: it hears after the
    /// observer has heard of the work's end, also while another thread is still delivering the
    /// events and the end waits behind them (found by the machine's explorer, issue 34).
    func testAConsumerTakesAStoredValueOnlyAfterTheObserverHeardTheWorkEnd() async throws {
        let order = LockedBox<[String]>([])
        let delivering = Gate()
        let resume = Gate()
        let coalescer = PrefetchableTaskCoalescer<String, Int>(prefetchTimeout: .seconds(3600)) { event in
            guard case .workEnded(let key, _, _, _, _, _) = event else { return }
            order.mutate { $0.append("\(key) ended") }
            if key == "other" {
                delivering.open()
                _ = resume.wait()
            }
        }
        let (stored, other) = (AsyncGate(), AsyncGate())
        let (feedRuns, otherRuns) = (Counter(), Counter())
        let prefetch = Task { try await coalescer.prefetch(key: "feed", operation: gated(stored, feedRuns)) }
        let held = Task { try? await coalescer.value(key: "other", operation: gated(other, otherRuns)) }
        await waitUntil("both works run") { feedRuns.current == 1 && otherRuns.current == 1 }
        // This thread delivers the other work's end, and stays in the observer.
        DispatchQueue.global().async { coalescer.cancel(key: "other") }
        XCTAssertTrue(delivering.wait())
        stored.open()
        await waitUntil("the prefetch ended") { coalescer.statistics.workSucceeded == 1 }
        let consumer = Task {
            let value = try await coalescer.value(key: "feed") { -1 }
            order.mutate { $0.append("consumer heard \(value)") }
        }
        // Taking the stored value counts as the one join here; the work's end is still behind
        // the other's, in the observer, so the consumer cannot have heard yet.
        await waitUntil("the consumer took the value") { coalescer.statistics.callersJoined == 1 }
        XCTAssertEqual(order.value, ["other ended"])
        resume.open()
        try await consumer.value
        try await prefetch.value
        _ = await held.value
        XCTAssertEqual(order.value, ["other ended", "feed ended", "consumer heard 1"])
    }

    func testEveryEventOfOneWorkNamesItsNumberAndTheWorkReadsTheSame() async throws {
        let log = EventLog()
        let coalescer = InFlightTaskCoalescer<String, Int?>(observer: log.observer)
        let gate = AsyncGate()
        let first = Task {
            try await coalescer.value(key: "a") {
                try await gate.wait()
                return ProgressReporter.current.work
            }
        }
        await waitUntil("the first work started") { coalescer.callerCount(for: "a") == 1 }
        let joined = Task { try await coalescer.value(key: "a") { nil } }
        await waitUntil("a caller joined") { coalescer.callerCount(for: "a") == 2 }
        let second = try await coalescer.value(key: "b") { ProgressReporter.current.work }
        gate.open()
        let firstNumber = try await first.value
        let joinedNumber = try await joined.value
        await waitUntil("both ends were reported") { log.steps.filter { $0.hasPrefix("ended") }.count == 2 }

        XCTAssertEqual(firstNumber, 1)
        XCTAssertEqual(joinedNumber, 1, "a caller that joined is handed the first work's value")
        XCTAssertEqual(second, 2)
        XCTAssertNil(ProgressReporter.current.work, "outside the work there is no work to name")
        let numbers = log.events.value.map { event -> (String, Int) in
            switch event {
            case .workStarted(let key, let work), .callerJoined(let key, let work, _),
                .callerWithdrawn(let key, let work, _), .priorityChanged(let key, let work, _),
                .workEnded(let key, let work, _, _, _, _), .workStalled(let key, let work, _, _):
                (key, work)
            }
        }
        XCTAssertEqual(numbers.filter { $0.0 == "a" }.map(\.1), [1, 1, 1])
        XCTAssertEqual(numbers.filter { $0.0 == "b" }.map(\.1), [2, 2])
    }

    func testTheEndOfFailedWorkCarriesItsErrorAndNoOtherEndCarriesOne() async throws {
        let log = EventLog()
        let coalescer = InFlightTaskCoalescer<String, Int>(observer: log.observer)
        _ = try? await coalescer.value(key: "failing") { throw WorkFailed() }
        _ = try await coalescer.value(key: "succeeding") { 1 }
        await waitUntil("both ends were reported") { log.steps.filter { $0.hasPrefix("ended") }.count == 2 }

        let errors = log.events.value.compactMap { event -> (WorkOutcome, (any Error)?)? in
            if case .workEnded(_, _, let outcome, let error, _, _) = event { (outcome, error) } else { nil }
        }
        XCTAssertEqual(errors.map(\.0), [.failed, .succeeded])
        XCTAssertTrue(
            errors[0].1 is WorkFailed, "the failure's end names the error: \(String(describing: errors[0].1))")
        XCTAssertNil(errors[1].1)
        XCTAssertTrue(log.events.value[1].description.contains("error: WorkFailed()"), log.events.value[1].description)
    }

    func testEventsArriveInTheOrderOfTheChanges() async throws {
        let log = EventLog()
        let coalescer = InFlightTaskCoalescer<String, Int>(observer: log.observer)
        let gate = AsyncGate()
        let work: @Sendable () async throws -> Int = {
            try await gate.wait()
            return 1
        }
        let first = Task { try await coalescer.value(key: "key", operation: work) }
        await waitUntil("the work started") { coalescer.callerCount(for: "key") == 1 }
        let second = Task { try await coalescer.value(key: "key", operation: work) }
        await waitUntil("the second caller joined") { coalescer.callerCount(for: "key") == 2 }
        let third = Task { try await coalescer.value(key: "key", timeout: .milliseconds(5), operation: work) }
        _ = await third.result
        second.cancel()
        _ = await second.result
        gate.open()
        _ = try await first.value
        await waitUntil("the work's end was reported") { log.steps.count == 6 }

        XCTAssertEqual(
            log.steps,
            [
                "started", "joined 2", "joined 3", "withdrawn timedOut", "withdrawn withdrawn", "ended succeeded 1",
            ])
        guard case .workEnded(let key, _, _, _, _, let duration) = log.events.value.last else {
            return XCTFail("no end reported")
        }
        XCTAssertEqual(key, "key")
        XCTAssertGreaterThan(duration, .zero)
    }

    func testTheLastCallerWithdrawingReportsTheWorkCancelledWithNobodyServed() async throws {
        let log = EventLog()
        let coalescer = InFlightTaskCoalescer<String, Int>(observer: log.observer)
        let only = Task {
            try await coalescer.value(key: "key") {
                try await AsyncGate().wait()
                return 0
            }
        }
        await waitUntil("the work started") { coalescer.callerCount(for: "key") == 1 }

        only.cancel()
        _ = await only.result

        await waitUntil("the end was reported") { log.steps.count == 3 }
        XCTAssertEqual(log.steps, ["started", "withdrawn withdrawn", "ended cancelled 0"])
    }

    func testAnObserverThatCallsBackIntoTheCoalescerDoesNotDeadlock() async throws {
        let holder = LockedBox<InFlightTaskCoalescer<String, Int>?>(nil)
        let seen = Counter()
        let coalescer = InFlightTaskCoalescer<String, Int>(observer: { event in
            seen.increment()
            guard let coalescer = holder.value else { return }
            _ = coalescer.statistics
            if case .workStarted("key", _) = event {
                // Cancels the work it is told about, from inside the report of its start.
                coalescer.cancel(key: "key")
                coalescer.forget(key: "other")
            }
        })
        holder.value = coalescer

        // Held until cancelled, so that the observer finds it in flight whichever thread reports.
        await XCTAssertThrowsCoalescingError(
            .cancelled,
            try await coalescer.value(key: "key") {
                try await AsyncGate().wait()
                return 1
            })

        let next = try await coalescer.value(key: "other") { 2 }
        XCTAssertEqual(next, 2)
        // The caller can be served before the end of its work is reported: the cancelled work's
        // task, ending late, may be delivering events on its own thread, and reports this end
        // after the caller was resumed (seen once under ThreadSanitizer: 3 events at the return).
        await waitUntil("both starts and both ends were reported") { seen.current >= 4 }
        holder.value = nil
    }

    func testDroppingTheCoalescerReleasesTheObserver() async throws {
        weak var released: Witness?
        do {
            let witness = Witness()
            released = witness
            let coalescer = InFlightTaskCoalescer<String, Int>(observer: { _ in _ = witness })
            let prefetchable = PrefetchableTaskCoalescer<String, Int>(
                prefetchTimeout: .seconds(30), observer: { _ in _ = witness })
            _ = try await coalescer.value(key: "key", timeout: .seconds(30)) { 1 }
            try await prefetchable.prefetch(key: "key") { 1 }
        }
        await waitUntil("the observer was released") { released == nil }
    }
}
