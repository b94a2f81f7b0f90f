import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantees 1 (once), 3 (the caller's queue), 4 (type safety), 6 (cancelling the work) and
/// 7 (after the finish), through the manager.
final class OperationQueueManagerTests: XCTestCase {
    private let callbacks = Queues.concurrent("callbacks")

    // MARK: 1. Once

    func testIdenticalOperationsEnqueuedWhilePendingRunTheWorkOnce() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let recorder = ResultRecorder<Int>()

        let admissions = ["tab bar", "header", "badge"].map { caller in
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .success(7)) },
                    completionHandler: recorder.handler(caller))
            ).admission
        }
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(3))
        XCTAssertEqual(admissions, [.startedWork, .joinedWork, .joinedWork])
        XCTAssertEqual(starts.current, 1)
        for caller in ["tab bar", "header", "badge"] {
            recorder.assertValue(caller, 7)
        }
    }

    func testIdenticalOperationsEnqueuedWhileExecutingJoinTheRunningWork() {
        let manager = OperationQueueManager()
        let starts = Counter()
        let started = Gate()
        let release = Gate()
        let recorder = ResultRecorder<String>()
        func operation() -> TestOperation<String> {
            TestOperation(
                callBackQueue: callbacks, starts: starts,
                work: { operation in
                    started.open()
                    DispatchQueue.global().async {
                        _ = release.wait()
                        operation.finish(result: .success("profile"))
                    }
                }, completionHandler: recorder.handler("caller"))
        }

        manager.enqueue(operation: operation())
        XCTAssertTrue(started.wait())
        XCTAssertEqual(manager.enqueue(operation: operation()).admission, .joinedWork)
        XCTAssertEqual(manager.enqueue(operation: operation()).admission, .joinedWork)
        release.open()

        XCTAssertTrue(recorder.waitForCalls(3))
        XCTAssertEqual(starts.current, 1)
        XCTAssertEqual(recorder.all.compactMap { try? $0.result.get() }, ["profile", "profile", "profile"])
    }

    func testConcurrentEnqueuesOfOneIdentifierStartExactlyOneWork() {
        // Look-up and insert are one atomic step: racing threads never both start the work.
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let callbacks = self.callbacks

        DispatchQueue.concurrentPerform(iterations: 200) { index in
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .success(1)) },
                    completionHandler: recorder.handler("caller \(index)")))
        }
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(200))
        XCTAssertEqual(starts.current, 1)
        XCTAssertEqual(Set(recorder.all.map(\.caller)).count, 200)
    }

    func testDifferentIdentifiersDoNotCoalesce() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let recorder = ResultRecorder<String>()

        for page in ["page 1", "page 2"] {
            manager.enqueue(
                operation: TestOperation<String>(
                    page, callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .success(page)) },
                    completionHandler: recorder.handler(page)))
        }
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(2))
        XCTAssertEqual(starts.current, 2)
        recorder.assertValue("page 1", "page 1")
        recorder.assertValue("page 2", "page 2")
    }

    // MARK: 3. The caller's queue

    func testEachHandlerRunsOnTheCallBackQueueOfTheOperationItsCallerCreated() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        let callerQueues = (0..<3).map { Queues.serial("caller \($0)") }

        for (index, callerQueue) in callerQueues.enumerated() {
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callerQueue, work: { $0.finish(result: .success(1)) },
                    completionHandler: recorder.handler("caller \(index)")))
        }
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(3))
        for (index, callerQueue) in callerQueues.enumerated() {
            XCTAssertTrue(recorder.calls(of: "caller \(index)").first?.queue === callerQueue)
        }
    }

    func testCallersSharingACallBackQueueAreServedInOneHop() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        let shared = CountingQueue()
        let other = CountingQueue()

        for index in 0..<100 {
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: index.isMultiple(of: 10) ? other : shared,
                    work: { $0.finish(result: .success(1)) }, completionHandler: recorder.handler("caller \(index)")))
        }
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(100))
        XCTAssertEqual(shared.added.current, 1, "90 callers on one queue, one delivery operation")
        XCTAssertEqual(other.added.current, 1, "10 callers on another queue, one delivery operation")
    }

    func testCallersOnManyCallBackQueuesAreServedOnTheirOwnWithOneHopPerQueue() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        let callerQueues = (0..<12).map { _ in CountingQueue() }

        for index in 0..<240 {
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callerQueues[index % 12], work: { $0.finish(result: .success(1)) },
                    completionHandler: recorder.handler("caller \(index)")))
        }
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(240))
        XCTAssertEqual(callerQueues.map(\.added.current), Array(repeating: 1, count: 12))
        for index in 0..<240 {
            XCTAssertTrue(recorder.calls(of: "caller \(index)").first?.queue === callerQueues[index % 12])
        }
    }

    /// Work that finishes on a thread of its own, with the library's default callback queue.
    private final class FinishingOnItsOwnThread: CoalescibleOperation<Int>, @unchecked Sendable {
        // @unchecked: adds only an immutable, thread-safe box.
        let finishingThread: LockedBox<Thread?>

        init(finishingThread: LockedBox<Thread?>, completionHandler: (@Sendable (Result<Int, Error>) -> Void)? = nil) {
            self.finishingThread = finishingThread
            super.init(identifier: "work", completionHandler: completionHandler)
        }

        override func main() {
            Thread.detachNewThread { [self] in
                finishingThread.value = .current
                finish(result: .success(1))
            }
        }
    }

    func testWithoutACallBackQueueEveryEntryPointRunsTheHandlerOnTheThreadThatSettlesTheWork() {
        // nil is the default of every entry point: the handler runs where the work ends, no hop.
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        let finishingThread = LockedBox<Thread?>(nil)
        let host = FinishingOnItsOwnThread(
            finishingThread: finishingThread, completionHandler: recorder.handler("operation's own"))
        let joiner = FinishingOnItsOwnThread(
            finishingThread: finishingThread, completionHandler: recorder.handler("joining operation"))

        XCTAssertEqual(manager.enqueue(operation: host).admission, .startedWork)
        XCTAssertEqual(manager.enqueue(operation: joiner).admission, .joinedWork)
        let handlerOnly = manager.enqueue(
            identifier: "work", makeOperation: { FinishingOnItsOwnThread(finishingThread: finishingThread) },
            completionHandler: recorder.handler("handler"))
        XCTAssertEqual(handlerOnly.admission, .joinedWork)
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(3))
        XCTAssertNil(host.callBackQueue)
        XCTAssertNil(ConcurrentOperation<Int>().callBackQueue)
        let thread = finishingThread.value
        XCTAssertNotNil(thread)
        for caller in ["operation's own", "joining operation", "handler"] {
            recorder.assertValue(caller, 1)
            XCTAssertTrue(recorder.calls(of: caller).first?.thread === thread, "\(caller) was called back elsewhere")
            XCTAssertNil(recorder.calls(of: caller).first?.queue, "\(caller) was called back on a queue")
        }
    }

    // MARK: 4. Type safety

    func testOperationsWithEqualIdentifiersButDifferentValueTypesNeverCoalesce() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let integers = ResultRecorder<Int>()
        let strings = ResultRecorder<String>()

        let first = manager.enqueue(
            operation: TestOperation<Int>(
                "user", callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .success(42)) },
                completionHandler: integers.handler("int")))
        let second = manager.enqueue(
            operation: TestOperation<String>(
                "user", callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .success("Ada")) },
                completionHandler: strings.handler("string")))
        queue.isSuspended = false

        XCTAssertTrue(integers.waitForCalls(1))
        XCTAssertTrue(strings.waitForCalls(1))
        XCTAssertEqual(first.admission, .startedWork)
        XCTAssertEqual(second.admission, .startedWork)
        XCTAssertEqual(starts.current, 2)
        integers.assertValue("int", 42)
        strings.assertValue("string", "Ada")
    }

    // MARK: 6. Cancelling the work

    func testCancellingTheOperationThatRunsTheWorkCancelsItForEveryCaller() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let operations = (0..<3).map { index in
            TestOperation<Int>(
                callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .success(1)) },
                completionHandler: recorder.handler("caller \(index)"))
        }
        operations.forEach { manager.enqueue(operation: $0) }

        operations[0].cancel()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()

        XCTAssertTrue(recorder.waitForCalls(3))
        XCTAssertEqual(starts.current, 0, "cancelled before start: the work never runs")
        (0..<3).forEach { recorder.assertCancelled("caller \($0)") }
        XCTAssertTrue(operations.allSatisfy(\.isFinished))
    }

    func testCancelIdentifierCancelsTheWorkForAllItsCallersOfEveryValueType() {
        let manager = OperationQueueManager()
        let started = Counter()
        let bothStarted = DispatchSemaphore(value: 0)
        let integers = ResultRecorder<Int>()
        let strings = ResultRecorder<String>()
        // Work that only ends by cancellation.
        let never: @Sendable (TestOperation<Int>) -> Void = { _ in
            started.increment()
            bothStarted.signal()
        }
        let neverString: @Sendable (TestOperation<String>) -> Void = { _ in
            started.increment()
            bothStarted.signal()
        }

        manager.enqueue(
            operation: TestOperation(
                "feed", callBackQueue: callbacks, work: never, completionHandler: integers.handler("a")))
        manager.enqueue(
            operation: TestOperation(
                "feed", callBackQueue: callbacks, work: never, completionHandler: integers.handler("b")))
        manager.enqueue(
            operation: TestOperation(
                "feed", callBackQueue: callbacks, work: neverString, completionHandler: strings.handler("c")))
        manager.enqueue(
            operation: TestOperation(
                "other", callBackQueue: callbacks, work: { $0.finish(result: .success(5)) },
                completionHandler: integers.handler("other")))
        XCTAssertEqual(bothStarted.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(bothStarted.wait(timeout: .now() + 10), .success)

        manager.cancel(identifier: "feed")

        XCTAssertTrue(integers.waitForCalls(3))
        XCTAssertTrue(strings.waitForCalls(1))
        integers.assertCancelled("a")
        integers.assertCancelled("b")
        strings.assertCancelled("c")
        integers.assertValue("other", 5)
        manager.queue.waitUntilAllOperationsAreFinished()
    }

    func testCancelAllCancelsCoalescedAndPlainOperations() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        for identifier in ["a", "a", "b"] {
            manager.enqueue(
                operation: TestOperation<Int>(
                    identifier, callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                    completionHandler: recorder.handler(identifier)))
        }
        let plainRan = Counter()
        let plain = BlockOperation { plainRan.increment() }
        manager.queue.addOperation(plain)

        manager.cancelAll()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()

        XCTAssertTrue(recorder.waitForCalls(3))
        XCTAssertEqual(recorder.all.count, 3)
        XCTAssertTrue(
            recorder.all.allSatisfy {
                if case .failure(let error) = $0.result {
                    error as? CoalescingError == .cancelled
                } else {
                    false
                }
            })
        XCTAssertTrue(plain.isCancelled)
        XCTAssertEqual(plainRan.current, 0)
    }

    func testTheQueuesCancelAllOperationsCancelsTheWorkForEveryCaller() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        for caller in ["a", "b"] {
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                    completionHandler: recorder.handler(caller)))
        }

        queue.cancelAllOperations()
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(2))
        recorder.assertCancelled("a")
        recorder.assertCancelled("b")
    }

    // MARK: 7. After the finish

    func testAnEnqueueAfterTheWorkFinishedStartsNewWork() {
        let manager = OperationQueueManager()
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        func enqueue(_ caller: String) -> CoalescingHandle<Int> {
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, starts: starts,
                    work: { $0.finish(result: .success(starts.current)) }, completionHandler: recorder.handler(caller)))
        }

        XCTAssertEqual(enqueue("first").admission, .startedWork)
        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(enqueue("second").admission, .startedWork)
        XCTAssertTrue(recorder.waitForCalls(1))

        XCTAssertEqual(starts.current, 2)
        recorder.assertValue("first", 1)
        recorder.assertValue("second", 2)
    }

    func testWorkThatFailsDeliversTheErrorToEveryCallerAndFreesTheIdentifier() {
        struct Failure: Error, Equatable {}
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        for caller in ["a", "b"] {
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .failure(Failure())) },
                    completionHandler: recorder.handler(caller)))
        }
        queue.isSuspended = false
        XCTAssertTrue(recorder.waitForCalls(2))
        for caller in ["a", "b"] {
            if case .failure(let error)? = recorder.onlyResult(of: caller) {
                XCTAssertEqual(error as? Failure, Failure())
            } else {
                XCTFail("\(caller) should have failed")
            }
        }

        let retry = manager.enqueue(
            operation: TestOperation<Int>(
                callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .success(1)) },
                completionHandler: recorder.handler("retry")))
        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(retry.admission, .startedWork)
        recorder.assertValue("retry", 1)
        XCTAssertEqual(starts.current, 2)
    }

    func testAnEnqueueAfterTheWorkWasCancelledStartsNewWorkEvenBeforeTheQueueDropsTheCancelledOne() {
        // The cancelled operation stays on the suspended queue, yet nobody may join it.
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        let cancelled = TestOperation<Int>(
            callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
            completionHandler: recorder.handler("cancelled"))
        manager.enqueue(operation: cancelled)
        cancelled.cancel()

        let fresh = manager.enqueue(
            operation: TestOperation<Int>(
                callBackQueue: callbacks, work: { $0.finish(result: .success(2)) },
                completionHandler: recorder.handler("fresh")))
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(2))
        XCTAssertEqual(fresh.admission, .startedWork)
        recorder.assertCancelled("cancelled")
        recorder.assertValue("fresh", 2)
    }

    func testOldWorkEndingAfterCancelAndRestartNeverUnregistersTheNewWork() {
        // Go singleflight #31420: the old work must not remove the entry of the work that replaced it.
        let manager = OperationQueueManager()
        let starts = Counter()
        let oldStarted = Gate()
        let newStarted = Gate()
        let releaseNew = Gate()
        let recorder = ResultRecorder<String>()
        let old = TestOperation<String>(
            callBackQueue: callbacks, starts: starts, work: { _ in oldStarted.open() },
            completionHandler: recorder.handler("old"))
        manager.enqueue(operation: old)
        XCTAssertTrue(oldStarted.wait())

        manager.cancel(identifier: "work")
        let new = manager.enqueue(
            operation: TestOperation<String>(
                callBackQueue: callbacks, starts: starts,
                work: { operation in
                    newStarted.open()
                    DispatchQueue.global().async {
                        _ = releaseNew.wait()
                        operation.finish(result: .success("new"))
                    }
                }, completionHandler: recorder.handler("new")))
        XCTAssertTrue(newStarted.wait())
        old.finish(result: .success("old work, late"))

        let third = manager.enqueue(
            operation: TestOperation<String>(
                callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .success("third")) },
                completionHandler: recorder.handler("third")))
        releaseNew.open()

        XCTAssertTrue(recorder.waitForCalls(3))
        XCTAssertEqual(new.admission, .startedWork)
        XCTAssertEqual(third.admission, .joinedWork)
        XCTAssertEqual(starts.current, 2)
        recorder.assertCancelled("old")
        recorder.assertValue("new", "new")
        recorder.assertValue("third", "new")
    }

    // MARK: Lifetime

    func testWorkInFlightOutlivesItsManagerAndStillServesItsCallers() async {
        let queue = Queues.concurrent("work", suspended: true)
        let recorder = ResultRecorder<Int>()
        weak var weakManager: OperationQueueManager?
        do {
            let manager = OperationQueueManager(queue: queue)
            weakManager = manager
            for caller in ["a", "b"] {
                manager.enqueue(
                    operation: TestOperation<Int>(
                        callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                        completionHandler: recorder.handler(caller)))
            }
        }
        XCTAssertNil(weakManager, "work in flight keeps what it needs to finish, not the manager")

        queue.isSuspended = false
        XCTAssertTrue(recorder.waitForCalls(2))
        recorder.assertValue("a", 1)
        recorder.assertValue("b", 1)
    }

    // MARK: Priority

    func testAMoreUrgentCallerRaisesThePriorityOfPendingWork() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        func operation(_ priority: Operation.QueuePriority, _ qos: QualityOfService) -> TestOperation<Int> {
            let operation = TestOperation<Int>(
                callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                completionHandler: recorder.handler("\(priority)"))
            operation.queuePriority = priority
            operation.qualityOfService = qos
            return operation
        }
        let host = operation(.low, .utility)
        manager.enqueue(operation: host)

        manager.enqueue(operation: operation(.veryHigh, .userInitiated))
        XCTAssertEqual(host.queuePriority, .veryHigh)
        XCTAssertEqual(host.qualityOfService, .userInitiated)

        manager.enqueue(operation: operation(.normal, .background))
        XCTAssertEqual(host.queuePriority, .veryHigh, "a less urgent caller never lowers it")
        XCTAssertEqual(host.qualityOfService, .userInitiated)

        queue.isSuspended = false
        XCTAssertTrue(recorder.waitForCalls(3))
    }
}
