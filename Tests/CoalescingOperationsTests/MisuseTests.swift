import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantee 10 (see the Guarantees article): bad use gets a documented outcome, never a crash or a hang.
/// (`finish(result:)` twice, `cancel()` after finishing and `start()` twice are in
/// `ConcurrentOperationTests`.)
final class MisuseTests: XCTestCase {
    private let callbacks = Queues.concurrent("callbacks")

    private func operation(
        _ identifier: String = "work", value: Int = 1, starts: Counter? = nil, recorder: ResultRecorder<Int>,
        caller: String
    ) -> TestOperation<Int> {
        TestOperation(
            identifier, callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .success(value)) },
            completionHandler: recorder.handler(caller))
    }

    func testEnqueueingTheSameOperationTwiceIsIgnoredAndItsCallerIsServedOnce() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let operation = operation(starts: starts, recorder: recorder, caller: "a")

        let first = manager.enqueue(operation: operation)
        let second = manager.enqueue(operation: operation)
        manager.enqueue(operation as Operation)
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
        let operation = operation(starts: starts, recorder: recorder, caller: "a")

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

    func testEnqueueingAnAbsorbedOperationAgainIsIgnored() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        manager.enqueue(operation: operation(recorder: recorder, caller: "a"))
        let absorbed = operation(recorder: recorder, caller: "b")
        XCTAssertEqual(manager.enqueue(operation: absorbed).admission, .joinedWork)

        XCTAssertEqual(manager.enqueue(operation: absorbed).admission, .ignored)
        XCTAssertEqual(OperationQueueManager().enqueue(operation: absorbed).admission, .ignored)
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(2))
        recorder.assertValue("a", 1)
        recorder.assertValue("b", 1)
    }

    func testEnqueueingACancelledOperationIsIgnoredAndItsCallerHearsOnce() {
        let manager = OperationQueueManager()
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let operation = operation(starts: starts, recorder: recorder, caller: "a")
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
        let operation = operation(starts: starts, recorder: recorder, caller: "a")
        manager.enqueue(operation: operation)
        operation.waitUntilFinished()

        XCTAssertEqual(manager.enqueue(operation: operation).admission, .ignored)
        manager.enqueue(operation as Operation)
        manager.queue.waitUntilAllOperationsAreFinished()

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(starts.current, 1)
        recorder.assertValue("a", 1)
    }

    func testEnqueueingFinishedOrExecutingPlainOperationsIsIgnored() {
        let manager = OperationQueueManager()
        let ran = Counter()
        let finished = BlockOperation { ran.increment() }
        finished.start()

        manager.enqueue(finished)
        manager.queue.waitUntilAllOperationsAreFinished()

        XCTAssertEqual(ran.current, 1)
    }

    func testAPlainConcurrentOperationEnqueuedTwiceRunsOnce() {
        final class Work: ConcurrentOperation<Int>, @unchecked Sendable {
            let starts = Counter()
            override func main() {
                starts.increment()
                finish(result: .success(1))
            }
        }
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        let work = Work(completionHandler: recorder.handler("a"))

        manager.enqueue(work)
        manager.enqueue(work)
        OperationQueueManager().enqueue(work)
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(work.starts.current, 1)
    }

    func testCoalesceRefusesWhatCannotJoin() {
        let recorder = ResultRecorder<Int>()
        let host = operation(recorder: recorder, caller: "host")
        let rider = operation(recorder: recorder, caller: "rider")
        let other = operation(recorder: recorder, caller: "other")

        XCTAssertFalse(host.coalesce(operation: host), "an operation cannot absorb itself")
        XCTAssertTrue(host.coalesce(operation: rider))
        XCTAssertFalse(host.coalesce(operation: rider), "already absorbed")
        XCTAssertFalse(other.coalesce(operation: host), "an operation that absorbed others cannot be absorbed")
        XCTAssertFalse(rider.coalesce(operation: other), "an absorbed operation cannot absorb")

        host.start()
        XCTAssertTrue(recorder.waitForCalls(2))
        XCTAssertFalse(host.coalesce(operation: other), "finished work takes no more callers")
        recorder.assertValue("host", 1)
        recorder.assertValue("rider", 1)
        XCTAssertEqual(recorder.calls(of: "other").count, 0)
    }

    func testStartingAnAbsorbedOperationByHandDoesNotRunItsWork() {
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let host = operation(starts: starts, recorder: recorder, caller: "host")
        let rider = operation(starts: starts, recorder: recorder, caller: "rider")
        XCTAssertTrue(host.coalesce(operation: rider))

        rider.start()
        XCTAssertEqual(starts.current, 0)
        host.start()

        XCTAssertTrue(recorder.waitForCalls(2))
        XCTAssertEqual(starts.current, 1)
        XCTAssertTrue(rider.isFinished)
    }

    func testAFactoryReturningAFinishedOperationCallsTheCallerBackWithCancelled() {
        let manager = OperationQueueManager()
        let recorder = ResultRecorder<Int>()
        let used = operation(recorder: recorder, caller: "used")
        used.start()
        XCTAssertTrue(recorder.waitForCalls(1))

        let handle = manager.enqueue(
            identifier: "work", callBackQueue: callbacks, makeOperation: { used },
            completionHandler: recorder.handler("late"))

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(handle.admission, .ignored)
        recorder.assertCancelled("late")
        handle.cancel()
    }
}
