import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantee 10 (see the Guarantees article): bad use gets a documented outcome, never a crash or a hang.
/// (`finish(result:)` twice, `cancel()` after finishing and `start()` twice are in
/// `ConcurrentOperationTests`; the deprecated `enqueue(_:)` and `coalesce(operation:)` are in
/// `DeprecatedSpellingsTests`.)
final class MisuseTests: XCTestCase {
    private let callbacks = Queues.concurrent("callbacks")

    func testEnqueueingTheSameOperationTwiceIsIgnoredAndItsCallerIsServedOnce() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let operation = TestOperation(
            finishingWith: 1, callBackQueue: callbacks, starts: starts, recorder: recorder, caller: "a")

        let first = manager.enqueue(operation: operation)
        let second = manager.enqueue(operation: operation)
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(first.admission, .startedWork)
        XCTAssertEqual(second.admission, .ignored)
        XCTAssertEqual(starts.current, 1)
        recorder.assertValue("a", 1)
    }

    func testAddingTheSameOperationToASecondManagerIsIgnored() {
        let firstQueue = Queues.concurrent("first", suspended: true)
        let secondQueue = Queues.concurrent("second", suspended: true)
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let operation = TestOperation(
            finishingWith: 1, callBackQueue: callbacks, starts: starts, recorder: recorder, caller: "a")

        let first = OperationQueueManager(queue: firstQueue).enqueue(operation: operation)
        let second = OperationQueueManager(queue: secondQueue).enqueue(operation: operation)
        firstQueue.isSuspended = false
        secondQueue.isSuspended = false
        firstQueue.waitUntilAllOperationsAreFinished()

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(first.admission, .startedWork)
        XCTAssertEqual(second.admission, .ignored)
        XCTAssertEqual(starts.current, 1)
        recorder.assertValue("a", 1)
    }

    func testEnqueueingAJoinedOperationAgainIsIgnored() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            operation: TestOperation(finishingWith: 1, callBackQueue: callbacks, recorder: recorder, caller: "a"))
        let joined = TestOperation(finishingWith: 1, callBackQueue: callbacks, recorder: recorder, caller: "b")
        XCTAssertEqual(manager.enqueue(operation: joined).admission, .joinedWork)

        XCTAssertEqual(manager.enqueue(operation: joined).admission, .ignored)
        XCTAssertEqual(OperationQueueManager().enqueue(operation: joined).admission, .ignored)
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(2))
        recorder.assertValue("a", 1)
        recorder.assertValue("b", 1)
    }

    func testEnqueueingACancelledOperationIsIgnoredAndItsCallerHearsOnce() {
        let manager = OperationQueueManager()
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let operation = TestOperation(
            finishingWith: 1, callBackQueue: callbacks, starts: starts, recorder: recorder, caller: "a")
        operation.cancel()

        XCTAssertEqual(manager.enqueue(operation: operation).admission, .ignored)
        manager.queue.waitUntilAllOperationsAreFinished()

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(starts.current, 0)
        recorder.assertCancelled("a")
    }

    func testEnqueueingAFinishedOperationIsIgnored() {
        let manager = OperationQueueManager()
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let operation = TestOperation(
            finishingWith: 1, callBackQueue: callbacks, starts: starts, recorder: recorder, caller: "a")
        manager.enqueue(operation: operation)
        operation.waitUntilFinished()

        XCTAssertEqual(manager.enqueue(operation: operation).admission, .ignored)
        manager.queue.waitUntilAllOperationsAreFinished()

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(starts.current, 1)
        recorder.assertValue("a", 1)
    }

    func testStartingAJoinedOperationByHandDoesNotRunItsWork() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let host = TestOperation(
            finishingWith: 1, callBackQueue: callbacks, starts: starts, recorder: recorder, caller: "host")
        let joiner = TestOperation(
            finishingWith: 1, callBackQueue: callbacks, starts: starts, recorder: recorder, caller: "joiner")
        XCTAssertEqual(manager.enqueue(operation: host).admission, .startedWork)
        XCTAssertEqual(manager.enqueue(operation: joiner).admission, .joinedWork)

        joiner.start()
        XCTAssertEqual(starts.current, 0)
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(2))
        XCTAssertEqual(starts.current, 1)
        recorder.assertValue("host", 1)
        recorder.assertValue("joiner", 1)
        XCTAssertTrue(joiner.isFinished)
    }

    func testAFactoryReturningAFinishedOperationCallsTheCallerBackWithCancelled() {
        let manager = OperationQueueManager()
        let recorder = ResultRecorder<Int>()
        let used = TestOperation(finishingWith: 1, callBackQueue: callbacks, recorder: recorder, caller: "used")
        used.start()
        XCTAssertTrue(recorder.waitForCalls(1))

        let handle = manager.enqueue(
            identifier: "work", callBackQueue: callbacks, makeOperation: { used },
            completionHandler: recorder.handler("late"))

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(handle.admission, .ignored)
        recorder.assertCancelled("late")
        handle.withdraw()
    }

    func testAnOperationHandedBackByMakeOperationAsItsWorkEndsStillAnswersTheCaller() {
        // `makeOperation` should build a new operation; one that hands back an operation whose
        // work is ending must still answer its caller, once (found by the progress tests: the
        // caller used to join work whose result was already decided, and wait forever).
        for _ in 0..<2_000 {
            let manager = OperationQueueManager()
            let operation = TestOperation<Int> { operation in
                DispatchQueue.global().async { operation.finish(result: .success(1)) }
            }
            manager.enqueue(operation: operation)
            let answered = Gate()
            let calls = Counter()
            manager.enqueue(identifier: "work", makeOperation: { operation }) { _ in
                calls.increment()
                answered.open()
            }
            XCTAssertTrue(answered.wait(), "a caller brought by a reused operation was never answered")
            manager.queue.waitUntilAllOperationsAreFinished()
            XCTAssertEqual(calls.current, 1)
        }
    }
}
