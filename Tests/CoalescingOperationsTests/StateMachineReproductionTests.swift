import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// The fourteen findings of issue 27, each as the smallest program that showed it, checked against
/// the Guarantees they broke (2, 3, 5, 10, 11, 19, 21, 22, 24 and 26; see the Guarantees article).
/// Findings 12 and 13 of the task half, and every interleaving of 2, 3, 11 and 14, are also
/// explored exhaustively on the machine itself by `MachineExplorationTests`.
final class StateMachineReproductionTests: XCTestCase {
    /// Bug 1: an operation that reported progress before it was enqueued left its manager, so a
    /// second caller started the work again. Guarantees 1 and 24.
    func testAnOperationThatReportsBeforeItIsEnqueuedStartsWorkThatOthersJoin() {
        let manager = OperationQueueManager(queue: Queues.concurrent("bug 1", suspended: true))
        let recorder = ResultRecorder<Int>()
        let callBack = Queues.serial("bug 1 callbacks")
        let first = TestOperation<Int>(
            "k", callBackQueue: callBack, work: { $0.finish(result: .success(1)) },
            completionHandler: recorder.handler("first"))
        first.report(progress: WorkProgress(completed: 0, total: 3))

        XCTAssertEqual(manager.enqueue(operation: first).admission, .startedWork)
        let second = manager.enqueue(identifier: "k", makeOperation: { CoalescibleOperation<Int>(identifier: "k") }) {
            recorder.append($0)
        }

        XCTAssertEqual(second.admission, .joinedWork)
        XCTAssertEqual(manager.statistics.workStarted, 1)
        manager.queue.isSuspended = false
        XCTAssertTrue(recorder.waitForCalls(2))
        XCTAssertEqual(recorder.values, [1, 1])
    }

    /// Bug 2: a task caller whose task was cancelled while a progress call to it was running heard
    /// its `CancellationError` during that call. Guarantees 24 and 26.
    func testAWithdrawnTaskCallerHearsItsErrorOnlyAfterTheProgressCallOnItsWay() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let log = LockedBox<[String]>([])
        let inCall = Gate()
        let work = AsyncGate()
        let caller = Task {
            do {
                return try await coalescer.value(
                    key: "k",
                    progress: { _ in
                        log.mutate { $0.append("progress begins") }
                        _ = inCall.wait()
                        log.mutate { $0.append("progress ends") }
                    }
                ) {
                    let reporter = ProgressReporter.current
                    DispatchQueue.global().async { reporter.report(progress: WorkProgress(completed: 1, total: 2)) }
                    try await work.wait()
                    return 1
                }
            } catch {
                log.mutate { $0.append("\(type(of: error))") }
                throw error
            }
        }
        await waitUntil("a progress call is on its way") { log.value == ["progress begins"] }
        caller.cancel()
        await waitUntil("the caller withdrew") { coalescer.statistics.callersWithdrawn == 1 }
        for _ in 0..<100 { await Task.yield() }
        inCall.open()
        await XCTAssertThrowsCancellation(try await caller.value)
        XCTAssertEqual(log.value, ["progress begins", "progress ends", "CancellationError"])
    }

    /// Bug 3: a joined operation finished by hand while a progress call to its caller ran (no
    /// callback queue) ran its handler during that call. Guarantees 2 and 24.
    func testAJoinedOperationFinishedByHandCallsBackAfterTheProgressCallOnItsWay() {
        let manager = OperationQueueManager()
        let release = Gate()
        let log = LockedBox<[String]>([])
        let runner = TestOperation<Int>("k", work: heldWork(release: release) { 1 })
        manager.enqueue(operation: runner)
        let inCall = Gate()
        let joined = CoalescibleOperation<Int>(identifier: "k") { result in
            log.mutate { $0.append("handler \((try? result.get()) ?? -1)") }
        }
        let handle = manager.enqueue(
            operation: joined,
            progress: { _ in
                log.mutate { $0.append("progress begins") }
                _ = inCall.wait()
                log.mutate { $0.append("progress ends") }
            })
        XCTAssertEqual(handle.admission, .joinedWork)
        DispatchQueue.global().async { runner.report(progress: WorkProgress(completed: 1, total: 2)) }
        XCTAssertTrue(waitFor { log.value == ["progress begins"] })

        joined.finish(result: .success(99))
        XCTAssertEqual(log.value, ["progress begins"], "the handler waits for the progress call")
        inCall.open()
        XCTAssertTrue(waitFor { log.value.count == 3 })
        XCTAssertEqual(log.value, ["progress begins", "progress ends", "handler 99"])
        release.open()
    }

    /// Bug 4: `WorkProgress(fractionCompleted: .nan)` trapped, and negative counts gave negative
    /// fractions. Both are clamped, as the doc comments say. Guarantee 24.
    func testProgressIsClampedToZeroThroughOneWhateverItIsGiven() {
        XCTAssertEqual(WorkProgress(fractionCompleted: .nan).fractionCompleted, 0)
        XCTAssertEqual(WorkProgress(fractionCompleted: -.infinity).fractionCompleted, 0)
        XCTAssertEqual(WorkProgress(fractionCompleted: .infinity).fractionCompleted, 1)
        XCTAssertEqual(WorkProgress(completed: -3, total: 10).fractionCompleted, 0)
        XCTAssertEqual(WorkProgress(completed: .min, total: 1).fractionCompleted, 0)
        XCTAssertEqual(WorkProgress(completed: 30, total: 10).fractionCompleted, 1)
    }

    /// Bug 5: thirty callers that asked for progress, on one callback queue, were served in thirty
    /// hops and one empty batch. Guarantee 3.
    func testCallersWhoAskedForProgressOnOneQueueAreServedInOneHop() {
        let manager = OperationQueueManager()
        let callBack = CountingQueue()
        callBack.isSuspended = true
        let runner = LockedBox<CoalescibleOperation<Int>?>(nil)
        let recorder = ResultRecorder<Int>()
        for index in 0..<30 {
            manager.enqueue(
                identifier: "k", callBackQueue: callBack,
                makeOperation: {
                    let operation = TestOperation<Int>("k", work: { _ in })
                    runner.value = operation
                    return operation
                }, progress: { _ in }, completionHandler: recorder.handler("caller \(index)"))
        }
        XCTAssertTrue(waitFor { runner.value?.isExecuting == true })

        runner.value!.finish(result: .success(1))

        XCTAssertEqual(callBack.added.current, 1)
        callBack.isSuspended = false
        XCTAssertTrue(recorder.waitForCalls(30))
    }

    /// Bug 7: a task awaiting an operation's work, escalated while the work waited on its queue,
    /// trapped on an index out of range. Its work now runs at the matching quality of service.
    /// Guarantees 11 and 19.
    func testAnEscalatedTaskCallerRaisesTheOperationsQualityOfService() async throws {
        let manager = OperationQueueManager(queue: Queues.concurrent("bug 7", suspended: true))
        let runner = LockedBox<CoalescibleOperation<Int>?>(nil)
        let waiter = Task(priority: .low) {
            try await manager.value(identifier: "k") {
                let operation = TestOperation<Int>("k", work: { $0.finish(result: .success(7)) })
                runner.value = operation
                return operation
            }
        }
        await waitUntil("the task waits") { manager.statistics.callersWaiting == 1 }
        let escalating = Task(priority: .high) { try await waiter.value }
        await waitUntil("the work follows the escalated caller") {
            runner.value?.qualityOfService == .userInitiated
        }
        manager.queue.isSuspended = false
        let value = try await escalating.value
        XCTAssertEqual(value, 7)
    }

    /// Bug 8: `setPriority` on the handle of a caller that had withdrawn raised the work again.
    /// Guarantee 19.
    func testAWithdrawnCallersHandleNoLongerMovesTheWork() {
        let manager = OperationQueueManager(queue: Queues.concurrent("bug 8", suspended: true))
        let runner = CoalescibleOperation<Int>(identifier: "k")
        manager.enqueue(operation: runner)
        let joined = manager.enqueue(identifier: "k", makeOperation: { CoalescibleOperation<Int>(identifier: "k") }) {
            _ in
        }
        joined.withdraw()

        joined.setPriority(OperationPriority(queuePriority: .veryHigh, qualityOfService: .userInteractive))

        XCTAssertEqual(runner.queuePriority, .normal)
        XCTAssertEqual(runner.qualityOfService, .default)
        runner.cancel()
    }

    /// Bug 9: an operation that joined without a handler, and so is no caller, lent its priority to
    /// the work. Guarantee 19.
    func testAnOperationThatJoinsWithoutAHandlerLendsTheWorkNoUrgency() {
        let manager = OperationQueueManager(queue: Queues.concurrent("bug 9", suspended: true))
        let runner = CoalescibleOperation<Int>(identifier: "k")
        manager.enqueue(operation: runner)
        let silent = CoalescibleOperation<Int>(identifier: "k")
        silent.queuePriority = .veryHigh

        XCTAssertEqual(manager.enqueue(operation: silent).admission, .joinedWork)

        XCTAssertEqual(runner.queuePriority, .normal)
        runner.cancel()
    }

    /// Bug 10: a `coalesce(operation:)` that returned false ("with no effect") took the operation
    /// out of coalescing all the same. Guarantees 1, 10 and 21.
    @available(*, deprecated, message: "checks the deprecated coalesce(operation:)")
    func testACoalesceThatReturnsFalseLeavesTheOperationFreshForItsManager() {
        let manager = OperationQueueManager(queue: Queues.concurrent("bug 10", suspended: true))
        let operation = CoalescibleOperation<Int>(identifier: "k")
        let decided = CoalescibleOperation<Int>(identifier: "k")
        decided.cancel()

        XCTAssertFalse(operation.coalesce(operation: decided))

        XCTAssertEqual(manager.enqueue(operation: operation).admission, .startedWork)
        let joined = manager.enqueue(identifier: "k", makeOperation: { CoalescibleOperation<Int>(identifier: "k") }) {
            _ in
        }
        XCTAssertEqual(joined.admission, .joinedWork)
        XCTAssertEqual(manager.statistics.workStarted, 1)
        operation.cancel()
    }

    /// Bug 11: finishing by hand a joined operation whose caller had withdrawn replaced the
    /// `CancellationError` it had heard. Guarantees 2, 5 and 26.
    func testAJoinedOperationFinishedAfterItsCallerWithdrewCallsBackNoMore() {
        let manager = OperationQueueManager(queue: Queues.concurrent("bug 11", suspended: true))
        manager.enqueue(operation: CoalescibleOperation<Int>(identifier: "k"))
        let recorder = ResultRecorder<Int>()
        let joined = CoalescibleOperation<Int>(identifier: "k", completionHandler: recorder.handler("joined"))
        let handle = manager.enqueue(operation: joined, progress: { _ in })
        handle.withdraw()
        XCTAssertTrue(recorder.waitForCalls(1))

        joined.finish(result: .success(99))

        XCTAssertEqual(recorder.all.count, 1, "no second callback")
        recorder.assertWithdrawn("joined")
        XCTAssertTrue(joined.isFinished)
        manager.cancelAll()
    }

    /// Bug 13: with another thread delivering events, callers were served before the observer
    /// heard that their work ended. Guarantee 22.
    func testCallersAreServedOnlyAfterTheObserverHeardTheirWorkEnd() {
        let log = LockedBox<[String]>([])
        let observerHeld = Gate()
        let holding = Gate()
        let manager = OperationQueueManager { event in
            if case .callerJoined(_, _, callers: 2) = event {
                holding.open()
                _ = observerHeld.wait()
            }
            if case .workEnded = event { log.mutate { $0.append("observer hears the end") } }
        }
        let runner = TestOperation<Int>("k", work: { _ in })
        manager.enqueue(operation: runner)
        manager.enqueue(identifier: "k", makeOperation: { CoalescibleOperation<Int>(identifier: "k") }) { _ in
            log.mutate { $0.append("first caller served") }
        }
        XCTAssertTrue(waitFor { runner.isExecuting })
        DispatchQueue.global().async {
            manager.enqueue(identifier: "k", makeOperation: { CoalescibleOperation<Int>(identifier: "k") }) { _ in
                log.mutate { $0.append("second caller served") }
            }
        }
        XCTAssertTrue(holding.wait(), "the observer is busy on another thread")

        runner.finish(result: .success(1))

        XCTAssertEqual(log.value, [], "nobody is served before the observer hears the end")
        observerHeld.open()
        XCTAssertTrue(waitFor { log.value.count == 3 })
        XCTAssertEqual(log.value.first, "observer hears the end")
    }

    /// Bug 14: a joined operation finished by hand while the work's result reached it called its
    /// handler twice. Guarantees 2 and 10.
    func testAJoinedOperationFinishedWhileTheResultReachesItCallsBackOnce() {
        for round in 0..<500 {
            let manager = OperationQueueManager()
            let runner = TestOperation<Int>("k", work: { _ in })
            manager.enqueue(operation: runner)
            let calls = Counter()
            let joined = CoalescibleOperation<Int>(identifier: "k") { _ in calls.increment() }
            manager.enqueue(operation: joined)
            XCTAssertTrue(waitFor { runner.isExecuting })

            DispatchQueue.concurrentPerform(iterations: 2) { side in
                if side == 0 {
                    runner.finish(result: .success(1))
                } else {
                    joined.finish(result: .success(99))
                }
            }

            XCTAssertEqual(calls.current, 1, "round \(round)")
            XCTAssertTrue(joined.isFinished)
            if calls.current != 1 { return }
        }
    }

    /// Waits for `condition`, set by another thread, yielding the processor in between rather than
    /// sleeping; false after 10 seconds.
    private func waitFor(_ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else { return false }
            sched_yield()
        }
        return true
    }
}
