import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantee 9 (see the Guarantees article): Foundation's waiting APIs work with our operations, and handlers may re-enter.
final class DeadlockTests: XCTestCase {
    /// Runs `body` on another thread and fails, instead of hanging, if it does not return in time.
    private func assertReturns(
        within seconds: Double = 60, _ what: String, file: StaticString = #filePath, line: UInt = #line,
        _ body: @escaping @Sendable () -> Void
    ) {
        let returned = Gate()
        Thread.detachNewThread {
            body()
            returned.open()
        }
        XCTAssertTrue(returned.wait(seconds: seconds), "\(what) did not return: deadlock", file: file, line: line)
    }

    /// 2,000 operations over 500 identifiers that finish from other threads.
    private func enqueueAsynchronousWork(on manager: OperationQueueManager, callbacks: OperationQueue)
        -> [TestOperation<Int>]
    {
        let operations = (0..<2_000).map { index in
            TestOperation<Int>(
                "work \(index % 500)", callBackQueue: callbacks,
                work: { operation in DispatchQueue.global().async { operation.finish(result: .success(index)) } },
                completionHandler: { _ in })
        }
        operations.forEach { manager.enqueue(operation: $0) }
        return operations
    }

    func testWaitUntilAllOperationsAreFinishedReturnsWithTwoThousandOperationsInFlight() {
        for width in [1, OperationQueue.defaultMaxConcurrentOperationCount] {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = width
            let manager = OperationQueueManager(queue: queue)
            let operations = enqueueAsynchronousWork(on: manager, callbacks: Queues.concurrent("callbacks"))

            assertReturns("waitUntilAllOperationsAreFinished at width \(width)") {
                queue.waitUntilAllOperationsAreFinished()
            }
            XCTAssertTrue(operations.allSatisfy(\.isFinished))
        }
    }

    func testWaitUntilFinishedReturnsForQueuedAndJoinedOperations() {
        for width in [1, OperationQueue.defaultMaxConcurrentOperationCount] {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = width
            let manager = OperationQueueManager(queue: queue)
            let operations = enqueueAsynchronousWork(on: manager, callbacks: Queues.concurrent("callbacks"))

            assertReturns("waitUntilFinished at width \(width)") {
                DispatchQueue.concurrentPerform(iterations: 4) { part in
                    for operation in operations[(part * 500)..<((part + 1) * 500)] {
                        operation.waitUntilFinished()
                    }
                }
            }
        }
    }

    func testAddOperationsWaitingUntilFinishedReturns() {
        let queue = Queues.concurrent("work")
        let operations = (0..<500).map { index in
            TestOperation<Int>(
                "work \(index)", callBackQueue: Queues.concurrent("callbacks"),
                work: { operation in DispatchQueue.global().async { operation.finish(result: .success(index)) } },
                completionHandler: { _ in })
        }

        assertReturns("addOperations(_:waitUntilFinished: true)") {
            queue.addOperations(operations, waitUntilFinished: true)
        }
        XCTAssertTrue(operations.allSatisfy(\.isFinished))
    }

    func testHandlersMayEnqueueAndCancelThroughTheManagerThatCalledThemBack() {
        // Inline handlers (no callback queue) run on the thread that finishes the work: the riskiest.
        let manager = OperationQueueManager()
        let recorder = ResultRecorder<Int>()
        let followUpDone = Gate()
        let host = TestOperation<Int>("first") { operation in
            DispatchQueue.global().async { operation.finish(result: .success(1)) }
        }
        manager.enqueue(
            identifier: "first", callBackQueue: nil, makeOperation: { host },
            completionHandler: { result in
                recorder.handler("first")(result)
                manager.cancel(identifier: "first")
                manager.cancelAll()
                manager.enqueue(
                    operation: TestOperation<Int>(
                        "second", callBackQueue: Queues.concurrent("callbacks"),
                        work: { $0.finish(result: .success(2)) },
                        completionHandler: { result in
                            recorder.handler("second")(result)
                            host.finish(result: .success(3))
                            host.cancel()
                            followUpDone.open()
                        }))
            })

        XCTAssertTrue(followUpDone.wait())
        XCTAssertTrue(recorder.waitForCalls(2))
        recorder.assertValue("first", 1)
        recorder.assertValue("second", 2)
    }

    func testCancellingFromManyThreadsWhileOthersWaitDoesNotDeadlock() {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 2
        let manager = OperationQueueManager(queue: queue)
        let operations = enqueueAsynchronousWork(on: manager, callbacks: Queues.concurrent("callbacks"))

        assertReturns("cancelling while waiting") {
            DispatchQueue.concurrentPerform(iterations: 3) { part in
                if part == 0 {
                    queue.waitUntilAllOperationsAreFinished()
                } else {
                    for (index, operation) in operations.enumerated() where index % 2 == part - 1 {
                        operation.cancel()
                    }
                }
            }
            queue.waitUntilAllOperationsAreFinished()
        }
        XCTAssertTrue(operations.allSatisfy(\.isFinished))
    }
}
