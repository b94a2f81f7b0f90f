import Foundation
import TestSupport
import XCTest

@testable import CoalescingOperations

/// The controls of the task coalescers: Guarantee 16 (forget), Guarantee 17 (a deadline for one
/// caller), Guarantee 18 (when the last caller withdraws), Guarantee 19 (priority follows the
/// callers: tasks raise and never lower) and Guarantee 20 (shared work runs free of any one
/// caller's task-locals). See the Guarantees article.
final class TaskCoalescerControlsTests: XCTestCase {
    struct WorkFailed: Error {}

    /// A value one caller sets for its own context, which the shared work must not see.
    enum RequestContext {
        @TaskLocal static var requestID: String?
    }

    private let runs = Counter()

    /// Starts a caller of `key` and waits until `callers` callers wait for the work.
    private func caller(
        of coalescer: InFlightTaskCoalescer<String, Int>, key: String = "key", callers: Int,
        timeout: Duration? = nil, whenAbandoned: AbandonedWorkPolicy = .cancel,
        work: @escaping @Sendable () async throws -> Int
    ) async -> Task<Int, Error> {
        let task = Task {
            try await coalescer.value(key: key, timeout: timeout, whenAbandoned: whenAbandoned, operation: work)
        }
        await waitUntil("\(callers) callers wait") { coalescer.callerCount(for: key) == callers }
        return task
    }

    // MARK: Guarantee 16: forget

    func testAfterForgetTheNextCallerStartsNewWorkWhileTheCallersAlreadyWaitingGetTheOldResult() async throws {
        let runs = self.runs
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let oldGate = AsyncGate()
        let newGate = AsyncGate()
        let sawCancellation = LockedBox(false)
        let old = await caller(of: coalescer, callers: 1) {
            let run = runs.increment()
            await oldGate.waitIgnoringCancellation()
            sawCancellation.value = Task.isCancelled
            return run
        }

        XCTAssertTrue(coalescer.forget(key: "key"))
        let new = await caller(of: coalescer, callers: 1, work: gated(newGate, runs))
        oldGate.open()

        let oldValue = try await old.value
        XCTAssertEqual(oldValue, 1, "the caller already waiting got the old work's result")
        XCTAssertFalse(sawCancellation.value, "forget cancels nothing")
        newGate.open()
        let newValue = try await new.value
        XCTAssertEqual(newValue, 2, "the next caller started new work")
    }

    func testTheForgottenWorkEndingNeverRemovesTheNewWork() async throws {
        let runs = self.runs
        // golang/go#31420: the old work's end removed the entry of the work started after Forget.
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let oldGate = AsyncGate()
        let newGate = AsyncGate()
        let old = await caller(of: coalescer, callers: 1, work: gated(oldGate, runs))
        coalescer.forget(key: "key")
        let new = await caller(of: coalescer, callers: 1, work: gated(newGate, runs))

        oldGate.open()
        _ = try await old.value
        await waitUntil("the old work ended") { coalescer.statistics.workEnded == 1 }
        let third = await caller(of: coalescer, callers: 2, work: gated(AsyncGate(), runs))

        newGate.open()
        let values = try await [new.value, third.value]
        XCTAssertEqual(values, [2, 2], "the third caller joined the new work")
        XCTAssertEqual(runs.current, 2)
    }

    func testForgetReportsWhetherWorkWasInFlight() async throws {
        let runs = self.runs
        let coalescer = InFlightTaskCoalescer<String, Int>()
        XCTAssertFalse(coalescer.forget(key: "key"))
        let gate = AsyncGate()
        let only = await caller(of: coalescer, callers: 1, work: gated(gate, runs))

        XCTAssertTrue(coalescer.forget(key: "key"))
        XCTAssertFalse(coalescer.forget(key: "key"), "already forgotten")
        gate.open()
        _ = try await only.value
    }

    func testCancelAllReachesForgottenWork() async throws {
        let runs = self.runs
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let gate = AsyncGate()
        let forgotten = await caller(of: coalescer, callers: 1, work: gated(gate, runs))
        coalescer.forget(key: "key")

        XCTAssertTrue(coalescer.cancelAll())

        await XCTAssertThrowsCoalescingError(.cancelled, try await forgotten.value)
        XCTAssertFalse(coalescer.cancelAll(), "nothing left")
    }

    func testForgetRacingTheOldWorksEndNeverJoinsANewCallerToTheOldWork() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        for round in 0..<300 {
            let gate = AsyncGate()
            let old = Task {
                try await coalescer.value(
                    key: "key",
                    operation: { [gate] in
                        try await gate.wait()
                        return 2 * round
                    })
            }
            await waitUntil("the old work has its caller") { coalescer.callerCount(for: "key") == 1 }

            // The old work ends while the key is forgotten, in either order.
            async let opened: Void = gate.open()
            coalescer.forget(key: "key")
            _ = await opened
            let next = try await coalescer.value(key: "key") { 2 * round + 1 }

            XCTAssertEqual(next, 2 * round + 1, "round \(round): a caller after forget started new work")
            let oldValue = try await old.value
            XCTAssertEqual(oldValue, 2 * round, "round \(round): the old caller got the old work's value")
        }
        let statistics = coalescer.statistics
        XCTAssertEqual(statistics.workStarted, 600)
        XCTAssertEqual(statistics.callersJoined, 0)
        XCTAssertEqual(statistics.workSucceeded, 600)
    }

    func testForgetDropsAStoredPrefetchSoTheNextConsumerStartsNewWork() async throws {
        let runs = self.runs
        let coalescer = PrefetchableTaskCoalescer<String, Int>(prefetchTimeout: .seconds(30))
        try await coalescer.prefetch(key: "feed") { runs.increment() }

        XCTAssertTrue(coalescer.forget(key: "feed"), "a result was stored")

        let consumed = try await coalescer.value(key: "feed") { runs.increment() }
        XCTAssertEqual(consumed, 2)
    }

    func testAPrefetchForgottenWhileRunningServesItsCallersAndStoresNothing() async throws {
        let runs = self.runs
        let coalescer = PrefetchableTaskCoalescer<String, Int>(prefetchTimeout: .seconds(30))
        let gate = AsyncGate()
        let prefetch = Task { try await coalescer.prefetch(key: "feed", operation: gated(gate, runs)) }
        await waitUntil("the prefetch started") { coalescer.callerCount(for: "feed") == 1 }

        XCTAssertTrue(coalescer.forget(key: "feed"))
        gate.open()
        try await prefetch.value

        XCTAssertEqual(coalescer.storedCount, 0, "a forgotten prefetch is not stored")
        let consumed = try await coalescer.value(key: "feed") { runs.increment() }
        XCTAssertEqual(consumed, 2)
    }

    // MARK: Guarantee 17: a deadline for one caller

    func testACallerWhoseTimeoutPassesThrowsTimedOutAndTheOthersGetTheValue() async throws {
        let runs = self.runs
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let gate = AsyncGate()
        let patient = await caller(of: coalescer, callers: 1, work: gated(gate, runs))
        let hasty = await caller(of: coalescer, callers: 2, timeout: .milliseconds(20), work: gated(gate, runs))

        do {
            _ = try await hasty.value
            XCTFail("expected a timeout")
        } catch {
            XCTAssertEqual(error as? CoalescingError, .timedOut)
        }
        XCTAssertEqual(coalescer.callerCount(for: "key"), 1, "the other caller still waits")
        gate.open()
        let value = try await patient.value
        XCTAssertEqual(value, 1)
        XCTAssertEqual(coalescer.statistics.callersTimedOut, 1)
        XCTAssertEqual(coalescer.statistics.callersServed, 1)
    }

    func testTheLastCallerTimingOutCancelsTheWorkByDefault() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let workSawCancellation = AsyncGate()
        let only = await caller(of: coalescer, callers: 1, timeout: .milliseconds(10)) {
            do {
                try await AsyncGate().wait()
            } catch {
                workSawCancellation.open()
                throw error
            }
            return 1
        }

        do {
            _ = try await only.value
            XCTFail("expected a timeout")
        } catch {
            XCTAssertEqual(error as? CoalescingError, .timedOut)
        }
        try await workSawCancellation.wait()
        XCTAssertEqual(coalescer.statistics.workCancelled, 1)
    }

    func testTheLastCallerTimingOutLeavesWorkThatRunsToCompletionForTheNextCaller() async throws {
        let runs = self.runs
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let gate = AsyncGate()
        let hasty = await caller(
            of: coalescer, callers: 1, timeout: .milliseconds(10), whenAbandoned: .runToCompletion,
            work: gated(gate, runs))
        do {
            _ = try await hasty.value
            XCTFail("expected a timeout")
        } catch {
            XCTAssertEqual(error as? CoalescingError, .timedOut)
        }

        let next = Task { try await coalescer.value(key: "key", operation: gated(gate, runs)) }
        await waitUntil("the next caller joined the work") { coalescer.statistics.callersJoined == 1 }
        gate.open()

        let value = try await next.value
        XCTAssertEqual(value, 1, "the next caller joined the work still running")
        XCTAssertEqual(runs.current, 1)
    }

    func testATimeoutPassingAsTheResultArrivesGivesTheCallerExactlyOneOutcome() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        var values = 0
        var timeouts = 0
        for round in 0..<300 {
            let gate = AsyncGate()
            let racing = Task {
                try await coalescer.value(key: "key", timeout: .microseconds(round % 50)) {
                    await gate.waitIgnoringCancellation()
                    return round
                }
            }
            gate.open()
            do {
                let value = try await racing.value
                XCTAssertEqual(value, round)
                values += 1
            } catch {
                XCTAssertEqual(error as? CoalescingError, .timedOut, "round \(round)")
                timeouts += 1
            }
        }
        await waitUntil("all work ended") { coalescer.statistics.workInFlight == 0 }
        let statistics = coalescer.statistics
        XCTAssertEqual(values + timeouts, 300)
        XCTAssertEqual(statistics.callersTimedOut, timeouts)
        XCTAssertEqual(statistics.callersServed, values)
        XCTAssertEqual(statistics.workStarted, 300)
    }

    func testAConsumerWhoseTimeoutPassesLeavesThePrefetchedValueForTheNextConsumer() async throws {
        let runs = self.runs
        let coalescer = PrefetchableTaskCoalescer<String, Int>(prefetchTimeout: .seconds(30))
        let gate = AsyncGate()
        let prefetch = Task { try await coalescer.prefetch(key: "feed", operation: gated(gate, runs)) }
        await waitUntil("the prefetch started") { coalescer.callerCount(for: "feed") == 1 }
        let hasty = Task {
            try await coalescer.value(key: "feed", timeout: .milliseconds(10), operation: gated(gate, runs))
        }

        do {
            _ = try await hasty.value
            XCTFail("expected a timeout")
        } catch {
            XCTAssertEqual(error as? CoalescingError, .timedOut)
        }
        gate.open()
        try await prefetch.value

        let consumed = try await coalescer.value(key: "feed") { runs.increment() }
        XCTAssertEqual(consumed, 1, "the prefetched value was stored for the next consumer")
    }

    // MARK: Guarantee 18: when the last caller withdraws

    func testWorkThatRunsToCompletionFinishesWithNobodyWaitingAndCallersWhoArriveJoinIt() async throws {
        let runs = self.runs
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let gate = AsyncGate()
        let sawCancellation = LockedBox(true)
        let first = await caller(of: coalescer, callers: 1, whenAbandoned: .runToCompletion) {
            let run = runs.increment()
            try await gate.wait()
            sawCancellation.value = Task.isCancelled
            return run
        }

        first.cancel()
        await XCTAssertThrowsCancellation(try await first.value)
        XCTAssertEqual(coalescer.statistics.workInFlight, 1, "the work goes on with nobody waiting")
        let second = Task { try await coalescer.value(key: "key", operation: gated(gate, runs)) }
        await waitUntil("a caller joined the abandoned work") { coalescer.callerCount(for: "key") == 1 }
        gate.open()

        let value = try await second.value
        XCTAssertEqual(value, 1)
        XCTAssertFalse(sawCancellation.value)
        XCTAssertEqual(coalescer.statistics.workSucceeded, 1)
        XCTAssertEqual(coalescer.statistics.callersWithdrawn, 1)
    }

    func testWorkThatRanToCompletionWithNobodyWaitingFreesItsKey() async throws {
        let runs = self.runs
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let gate = AsyncGate()
        let first = await caller(of: coalescer, callers: 1, whenAbandoned: .runToCompletion, work: gated(gate, runs))
        first.cancel()
        await XCTAssertThrowsCancellation(try await first.value)

        gate.open()
        await waitUntil("the work ended") { coalescer.statistics.workEnded == 1 }

        let next = try await coalescer.value(key: "key") { runs.increment() }
        XCTAssertEqual(next, 2, "the next caller starts new work")
        XCTAssertEqual(coalescer.statistics.workSucceeded, 2)
        XCTAssertEqual(coalescer.statistics.callersServed, 1)
    }

    func testThePolicyOfTheCallerThatStartedTheWorkDecides() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let workSawCancellation = AsyncGate()
        let work: @Sendable () async throws -> Int = {
            do {
                try await AsyncGate().wait()
            } catch {
                workSawCancellation.open()
                throw error
            }
            return 1
        }
        let starter = await caller(of: coalescer, callers: 1, whenAbandoned: .cancel, work: work)
        let second = await caller(of: coalescer, callers: 2, whenAbandoned: .runToCompletion, work: work)

        starter.cancel()
        second.cancel()

        await XCTAssertThrowsCancellation(try await starter.value)
        await XCTAssertThrowsCancellation(try await second.value)
        try await workSawCancellation.wait()
        XCTAssertEqual(coalescer.statistics.workCancelled, 1)
    }

    func testTheLastCallerWithdrawingAsTheResultArrivesEndsTheWorkOnceUnderEitherPolicy() async throws {
        for policy in [AbandonedWorkPolicy.cancel, .runToCompletion] {
            let coalescer = InFlightTaskCoalescer<String, Int>()
            var served = 0
            for round in 0..<300 {
                let gate = AsyncGate()
                // A key per round: work that runs to completion may outlive its round.
                let key = "round \(round)"
                let only = Task {
                    try await coalescer.value(key: key, whenAbandoned: policy) {
                        await gate.waitIgnoringCancellation()
                        return round
                    }
                }
                await waitUntil("the caller joined") { coalescer.callerCount(for: key) == 1 }
                async let opened: Void = gate.open()
                only.cancel()
                _ = await opened
                switch await only.result {
                case .success(let value):
                    XCTAssertEqual(value, round)
                    served += 1
                case .failure(let error):
                    XCTAssertTrue(error is CancellationError, "\(policy), round \(round): \(error)")
                }
            }
            await waitUntil("all work ended") { coalescer.statistics.workInFlight == 0 }
            let statistics = coalescer.statistics
            XCTAssertEqual(statistics.workEnded, 300, "\(policy)")
            XCTAssertEqual(statistics.callersServed, served, "\(policy)")
            XCTAssertEqual(statistics.callersWithdrawn, 300 - served, "\(policy)")
            if policy == .runToCompletion {
                XCTAssertEqual(statistics.workSucceeded, 300, "work that runs to completion is never cancelled")
            } else {
                XCTAssertEqual(statistics.workCancelled, 300 - served, "abandoned work is cancelled")
            }
        }
    }

    func testAPrefetchThatRunsToCompletionStoresItsValueWhenEveryPrefetcherIsCancelled() async throws {
        let runs = self.runs
        let coalescer = PrefetchableTaskCoalescer<String, Int>(prefetchTimeout: .seconds(30))
        let gate = AsyncGate()
        let prefetch = Task {
            try await coalescer.prefetch(key: "feed", whenAbandoned: .runToCompletion, operation: gated(gate, runs))
        }
        await waitUntil("the prefetch started") { coalescer.callerCount(for: "feed") == 1 }

        prefetch.cancel()
        await XCTAssertThrowsCancellation(try await prefetch.value)
        gate.open()
        await waitUntil("the prefetch stored its value") { coalescer.storedCount == 1 }

        let consumed = try await coalescer.value(key: "feed") { runs.increment() }
        XCTAssertEqual(consumed, 1)
    }

    // MARK: Guarantee 19: priority follows the callers (tasks: raise only)

    func testAMoreUrgentCallerRaisesTheWorkAndWithdrawingNeverLowersIt() async throws {
        let events = LockedBox<[CoalescingEvent<String>]>([])
        let coalescer = InFlightTaskCoalescer<String, TaskPriority>(observer: { event in
            events.mutate { $0.append(event) }
        })
        let gate = AsyncGate()
        let work: @Sendable () async throws -> TaskPriority = {
            await gate.waitIgnoringCancellation()
            return Task.currentPriority
        }
        let low = Task(priority: .low) { try await coalescer.value(key: "key", operation: work) }
        await waitUntil("the first caller joined") { coalescer.callerCount(for: "key") == 1 }
        let urgent = Task(priority: .high) { try await coalescer.value(key: "key", operation: work) }
        await waitUntil("the urgent caller joined") { coalescer.callerCount(for: "key") == 2 }

        urgent.cancel()
        await XCTAssertThrowsCancellation(try await urgent.value)
        gate.open()

        let priority = try await low.value
        XCTAssertGreaterThanOrEqual(priority, .high, "raised, and not lowered when the urgent caller withdrew")
        let changes = events.value.compactMap { event -> WorkPriority? in
            if case .priorityChanged(_, _, let priority) = event { priority } else { nil }
        }
        XCTAssertEqual(changes, [.task(.high)])
    }

    func testThePriorityArgumentOfTheStartingCallerSetsTheWorksPriority() async throws {
        let inFlight = InFlightTaskCoalescer<String, TaskPriority>()
        let prefetchable = PrefetchableTaskCoalescer<String, TaskPriority>(prefetchTimeout: .seconds(30))

        let plain = try await inFlight.value(key: "key", priority: .low) { Task.currentPriority }
        let consumed = try await prefetchable.value(key: "key", priority: .low) { Task.currentPriority }
        try await prefetchable.prefetch(key: "next", priority: .low) { Task.currentPriority }
        let prefetched = try await prefetchable.value(key: "next") { .high }

        XCTAssertEqual([plain, consumed, prefetched], [.low, .low, .low])
    }

    // MARK: Guarantee 20: shared work runs free of any one caller's task-locals

    func testTheWorkDoesNotSeeTheStartingCallersTaskLocals() async throws {
        let inFlight = InFlightTaskCoalescer<String, String?>()
        let prefetchable = PrefetchableTaskCoalescer<String, String?>(prefetchTimeout: .seconds(30))

        let seen = try await RequestContext.$requestID.withValue("request 1") {
            XCTAssertEqual(RequestContext.requestID, "request 1")
            let plain = try await inFlight.value(key: "key") { RequestContext.requestID }
            let consumed = try await prefetchable.value(key: "key") { RequestContext.requestID }
            try await prefetchable.prefetch(key: "next") { RequestContext.requestID }
            let prefetched = try await prefetchable.value(key: "next") { "not prefetched" }
            return [plain, consumed, prefetched]
        }

        XCTAssertEqual(seen, [nil, nil, nil])
    }

    func testTheWorkKeepsTheStartingCallersPriority() async throws {
        let coalescer = InFlightTaskCoalescer<String, TaskPriority>()
        let priority = try await Task(priority: .high) {
            try await coalescer.value(key: "key") { Task.currentPriority }
        }.value
        XCTAssertGreaterThanOrEqual(priority, .high)
    }
}
