import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantee 5 (see the Guarantees article): withdrawing one caller leaves the others served; the last one out cancels the work.
final class WithdrawalTests: XCTestCase {
    private let callbacks = Queues.concurrent("callbacks")

    func testCancellingAJoinedOperationWithdrawsOnlyItsCaller() {
        let manager = OperationQueueManager()
        let started = Gate()
        let release = Gate()
        let recorder = ResultRecorder<Int>()
        let work = heldWork(release: release, started: started) { 9 }
        let operations = ["a", "b", "c"].map {
            TestOperation<Int>(callBackQueue: callbacks, work: work, completionHandler: recorder.handler($0))
        }
        operations.forEach { manager.enqueue(operation: $0) }
        XCTAssertTrue(started.wait())

        operations[1].cancel()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertWithdrawn("b")
        XCTAssertTrue(operations[1].isFinished, "a withdrawn operation reports finished")

        release.open()
        XCTAssertTrue(recorder.waitForCalls(2))
        recorder.assertValue("a", 9)
        recorder.assertWithdrawn("b")
        recorder.assertValue("c", 9)
        XCTAssertFalse(operations[0].isCancelled)
    }

    func testTheHandleWithdrawsTheCallerWhoseOperationRunsTheWorkWithoutStoppingIt() {
        let manager = OperationQueueManager()
        let started = Gate()
        let release = Gate()
        let recorder = ResultRecorder<Int>()
        let work = heldWork(release: release, started: started) { 3 }
        let host = manager.enqueue(
            operation: TestOperation(callBackQueue: callbacks, work: work, completionHandler: recorder.handler("host")))
        manager.enqueue(
            operation: TestOperation(
                callBackQueue: callbacks, work: work, completionHandler: recorder.handler("joining")))
        XCTAssertTrue(started.wait())

        host.withdraw()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertWithdrawn("host")

        release.open()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("joining", 3)
        XCTAssertEqual(recorder.all.count, 2)
    }

    func testWhenEveryCallerWithdrawsTheWorkIsCancelled() {
        let manager = OperationQueueManager()
        let started = Gate()
        let release = Gate()
        let ended = Gate()
        let sawCancellation = Counter()
        let recorder = ResultRecorder<Int>()
        let work = heldWork(release: release, started: started, sawCancellation: sawCancellation, ended: ended) { 1 }
        let handles = ["a", "b", "c"].map {
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, work: work, completionHandler: recorder.handler($0)))
        }
        XCTAssertTrue(started.wait())

        handles.forEach { $0.withdraw() }
        XCTAssertTrue(recorder.waitForCalls(3))
        release.open()
        XCTAssertTrue(ended.wait())

        ["a", "b", "c"].forEach { recorder.assertWithdrawn($0) }
        XCTAssertEqual(sawCancellation.current, 1, "the work saw isCancelled")
    }

    func testWithdrawingTwiceIsHarmless() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        let handles = ["a", "b"].map {
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, work: { $0.finish(result: .success(2)) },
                    completionHandler: recorder.handler($0)))
        }

        handles[1].withdraw()
        handles[1].withdraw()
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(2))
        recorder.assertValue("a", 2)
        recorder.assertWithdrawn("b")
    }

    func testWithdrawingAfterTheResultWasDecidedChangesNothing() {
        let manager = OperationQueueManager()
        let recorder = ResultRecorder<Int>()
        let handle = manager.enqueue(
            operation: TestOperation<Int>(
                callBackQueue: callbacks, work: { $0.finish(result: .success(4)) },
                completionHandler: recorder.handler("a")))
        XCTAssertTrue(recorder.waitForCalls(1))

        handle.withdraw()
        manager.queue.waitUntilAllOperationsAreFinished()
        callbacks.waitUntilAllOperationsAreFinished()

        recorder.assertValue("a", 4)
    }

    func testAHandlerOnlyCallerJoinsWithoutAnOperationAndCanWithdraw() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let made = Counter()
        let recorder = ResultRecorder<Int>()
        func make() -> CoalescibleOperation<Int> {
            made.increment()
            return TestOperation<Int>(starts: starts) { $0.finish(result: .success(8)) }
        }

        let first = manager.enqueue(
            identifier: "work", callBackQueue: callbacks, makeOperation: make, completionHandler: recorder.handler("a"))
        let second = manager.enqueue(
            identifier: "work", callBackQueue: callbacks, makeOperation: make, completionHandler: recorder.handler("b"))
        let third = manager.enqueue(
            identifier: "work", callBackQueue: callbacks, makeOperation: make, completionHandler: recorder.handler("c"))
        third.withdraw()
        XCTAssertTrue(recorder.waitForCalls(1))
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(2))
        XCTAssertEqual([first.admission, second.admission, third.admission], [.startedWork, .joinedWork, .joinedWork])
        XCTAssertEqual(made.current, 1, "joining callers build no operation")
        XCTAssertEqual(starts.current, 1)
        recorder.assertValue("a", 8)
        recorder.assertValue("b", 8)
        recorder.assertWithdrawn("c")
    }

    func testAnOperationEnqueuedWithoutACallerRunsForTheCallersWhoJoinIt() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        let warmUp = manager.enqueue(operation: TestOperation<Int> { $0.finish(result: .success(6)) })
        let joined = manager.enqueue(
            identifier: "work", callBackQueue: callbacks,
            makeOperation: { TestOperation<Int> { $0.finish(result: .success(0)) } },
            completionHandler: recorder.handler("a"))

        warmUp.withdraw()  // withdraws nobody: a caller is still waiting
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(joined.admission, .joinedWork)
        recorder.assertValue("a", 6)
    }

    func testWithdrawingRacingTheFinishCallsEachCallerBackExactlyOnce() {
        for _ in 0..<300 {
            let manager = OperationQueueManager()
            let started = Gate()
            let recorder = ResultRecorder<Int>()
            let finishNow = DispatchSemaphore(value: 0)
            let work: @Sendable (TestOperation<Int>) -> Void = { operation in
                started.open()
                DispatchQueue.global().async {
                    finishNow.wait()
                    operation.finish(result: .success(1))
                }
            }
            let handles = (0..<4).map {
                manager.enqueue(
                    operation: TestOperation<Int>(
                        callBackQueue: callbacks, work: work, completionHandler: recorder.handler("\($0)")))
            }
            XCTAssertTrue(started.wait())

            finishNow.signal()
            DispatchQueue.concurrentPerform(iterations: 4) { handles[$0].withdraw() }

            XCTAssertTrue(recorder.waitForCalls(4))
            for caller in 0..<4 {
                XCTAssertEqual(recorder.calls(of: "\(caller)").count, 1)
            }
        }
    }
}
