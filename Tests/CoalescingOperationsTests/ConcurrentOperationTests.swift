import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// The lifecycle of the base class: Guarantees 2 and 6 (see the Guarantees article) for a single operation, and the platform rules.
final class ConcurrentOperationTests: XCTestCase {
    /// An operation whose work is a closure.
    final class ClosureOperation: ConcurrentOperation<Int>, @unchecked Sendable {
        // @unchecked: adds only immutable properties.
        let work: @Sendable (ClosureOperation) -> Void
        let mainCalls = Counter()

        init(
            callBackQueue: OperationQueue? = nil,
            work: @escaping @Sendable (ClosureOperation) -> Void,
            completionHandler: (@Sendable (Result<Int, Error>) -> Void)?
        ) {
            self.work = work
            super.init(callBackQueue: callBackQueue, completionHandler: completionHandler)
        }

        override func main() {
            mainCalls.increment()
            work(self)
        }
    }

    func testTheHandlerReceivesTheResultOnTheCallBackQueue() {
        let recorder = ResultRecorder<Int>()
        let callbacks = Queues.serial("callbacks")
        let operation = ClosureOperation(
            callBackQueue: callbacks, work: { $0.finish(result: .success(5)) }, completionHandler: recorder.handler("a")
        )

        OperationQueue().addOperation(operation)

        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("a", 5)
        XCTAssertTrue(recorder.all.first?.queue === callbacks)
    }

    func testWithoutACallBackQueueTheHandlerRunsOnTheFinishingThread() {
        let recorder = ResultRecorder<Int>()
        let finishingThread = LockedBox<Thread?>(nil)
        let operation = ClosureOperation(
            work: { operation in
                Thread.detachNewThread {
                    finishingThread.value = .current
                    operation.finish(result: .success(1))
                }
            }, completionHandler: recorder.handler("a"))

        operation.start()

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertTrue(recorder.all.first?.thread === finishingThread.value)
    }

    func testTheOperationStaysExecutingUntilFinishIsCalled() {
        let started = Gate()
        let release = Gate()
        let queue = OperationQueue()
        let operation = ClosureOperation(
            work: { operation in
                started.open()
                DispatchQueue.global().async {
                    _ = release.wait()
                    operation.finish(result: .success(1))
                }
            }, completionHandler: nil)

        queue.addOperation(operation)
        XCTAssertTrue(started.wait())
        XCTAssertTrue(operation.isExecuting)
        XCTAssertFalse(operation.isFinished)

        release.open()
        operation.waitUntilFinished()
        XCTAssertTrue(operation.isFinished)
        XCTAssertFalse(operation.isExecuting)
        XCTAssertTrue(operation.isAsynchronous)
    }

    func testFinishingTwiceDeliversOnlyTheFirstResult() {
        let recorder = ResultRecorder<Int>()
        let operation = ClosureOperation(
            work: { operation in
                operation.finish(result: .success(1))
                operation.finish(result: .success(2))
                operation.finish(result: .failure(CoalescingError.cancelled))
            }, completionHandler: recorder.handler("a"))

        operation.start()

        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("a", 1)
    }

    func testCancellingAfterTheFinishChangesNothing() {
        let recorder = ResultRecorder<Int>()
        let operation = ClosureOperation(
            work: { $0.finish(result: .success(1)) }, completionHandler: recorder.handler("a"))
        operation.start()
        XCTAssertTrue(recorder.waitForCalls(1))

        operation.cancel()

        recorder.assertValue("a", 1)
        XCTAssertTrue(operation.isFinished)
    }

    func testCancellingWhileExecutingFinishesAtOnceAndIgnoresTheLateResult() {
        let recorder = ResultRecorder<Int>()
        let started = Gate()
        let release = Gate()
        let workEnded = Gate()
        let operation = ClosureOperation(
            work: { operation in
                started.open()
                DispatchQueue.global().async {
                    _ = release.wait()
                    operation.finish(result: .success(1))
                    workEnded.open()
                }
            }, completionHandler: recorder.handler("a"))
        OperationQueue().addOperation(operation)
        XCTAssertTrue(started.wait())

        operation.cancel()
        XCTAssertTrue(operation.isFinished)
        release.open()
        XCTAssertTrue(workEnded.wait())

        recorder.assertCancelled("a")
    }

    func testCancelBeforeStartCallsBackAtOnceButFinishesOnlyWhenTheQueueStartsIt() {
        let recorder = ResultRecorder<Int>()
        let queue = Queues.serial("work", suspended: true)
        let operation = ClosureOperation(
            work: { $0.finish(result: .success(1)) }, completionHandler: recorder.handler("a"))
        queue.addOperation(operation)

        operation.cancel()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertCancelled("a")
        XCTAssertFalse(operation.isFinished, "a queued operation never finishes before its queue started it")

        queue.isSuspended = false
        operation.waitUntilFinished()
        XCTAssertTrue(operation.isFinished)
        XCTAssertEqual(operation.mainCalls.current, 0)
        recorder.assertCancelled("a")
    }

    func testAThousandOperationsCancelledBeforeStartDoNotJamTheQueue() {
        for width in [1, OperationQueue.defaultMaxConcurrentOperationCount] {
            let queue = Queues.concurrent("work", suspended: true)
            queue.maxConcurrentOperationCount = width
            let recorder = ResultRecorder<Int>()
            let operations = (0..<1_000).map {
                ClosureOperation(work: { $0.finish(result: .success(1)) }, completionHandler: recorder.handler("\($0)"))
            }
            queue.addOperations(operations, waitUntilFinished: false)
            operations.forEach { $0.cancel() }

            queue.isSuspended = false
            queue.waitUntilAllOperationsAreFinished()
            XCTAssertTrue(recorder.waitForCalls(1_000))

            XCTAssertTrue(operations.allSatisfy(\.isFinished))
            XCTAssertEqual(operations.map(\.mainCalls.current).reduce(0, +), 0)
            XCTAssertEqual(recorder.all.count, 1_000)
        }
    }

    func testFinishingBeforeStartDecidesTheResultAndTheWorkNeverRuns() {
        let recorder = ResultRecorder<Int>()
        let queue = Queues.serial("work", suspended: true)
        let operation = ClosureOperation(
            work: { $0.finish(result: .success(1)) }, completionHandler: recorder.handler("a"))
        queue.addOperation(operation)

        operation.finish(result: .success(99))
        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertFalse(operation.isFinished)

        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(operation.mainCalls.current, 0)
        recorder.assertValue("a", 99)
    }

    func testStartingTwiceRunsTheWorkOnce() {
        let recorder = ResultRecorder<Int>()
        let operation = ClosureOperation(work: { _ in }, completionHandler: recorder.handler("a"))

        operation.start()
        operation.start()
        XCTAssertEqual(operation.mainCalls.current, 1)

        operation.finish(result: .success(1))
        operation.start()
        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(operation.mainCalls.current, 1)
        recorder.assertValue("a", 1)
    }

    func testCancelRacingFinishCallsBackExactlyOnce() {
        for iteration in 0..<500 {
            let recorder = ResultRecorder<Int>()
            let go = DispatchSemaphore(value: 0)
            let operation = ClosureOperation(
                work: { operation in
                    DispatchQueue.global().async {
                        go.wait()
                        operation.finish(result: .success(iteration))
                    }
                }, completionHandler: recorder.handler("a"))
            operation.start()

            go.signal()
            operation.cancel()

            XCTAssertTrue(recorder.waitForCalls(1))
            XCTAssertEqual(recorder.all.count, 1)
            XCTAssertTrue(operation.isFinished)
        }
    }

    func testFoundationsCompletionBlockAndDependenciesWork() {
        let queue = OperationQueue()
        let order = LockedBox<[String]>([])
        let completionRan = Gate()
        let first = ClosureOperation(
            work: { operation in
                DispatchQueue.global().async {
                    order.mutate { $0.append("first") }
                    operation.finish(result: .success(1))
                }
            }, completionHandler: nil)
        first.completionBlock = { completionRan.open() }
        let second = BlockOperation { order.mutate { $0.append("second") } }
        second.addDependency(first)

        queue.addOperations([second, first], waitUntilFinished: true)

        XCTAssertEqual(order.value, ["first", "second"])
        XCTAssertTrue(completionRan.wait())
    }
}
