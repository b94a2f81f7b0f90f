import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantees 2 (exactly one callback per caller), 5 (withdrawing one caller) and 6 (cancelling
/// the work), at the moments an outside adversarial suite found them broken: a cancellation that
/// meets a result already on its way, and work cancelled while it waits on a dependency. (The
/// third, an operation that others joined by hand meeting identical work in flight, is in
/// `DeprecatedSpellingsTests`, with the deprecated `coalesce(operation:)`.)
final class CancellationRaceTests: XCTestCase {
    private let callbacks = Queues.concurrent("callbacks")

    // MARK: A result on its way is never lost

    /// Issue 9, bug 1: `cancelAll()` cancelled the work, which queued the `.cancelled` delivery on
    /// the manager's own queue, then cancelled that queue's operations, delivery included.
    func testCancelAllDeliversCancelledToACallerWhoseCallbackQueueIsTheManagersOwn() {
        let queue = Queues.concurrent("work and callbacks", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            operation: TestOperation(
                callBackQueue: queue, work: { $0.finish(result: .success(1)) },
                completionHandler: recorder.handler("caller")))

        manager.cancelAll()
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(1), "the caller never heard back")
        recorder.assertCancelled("caller")
    }

    /// Issue 9, bug 1, by another way in: the app cancels its own busy callback queue's operations
    /// while a result waits there.
    func testCancellingTheCallbackQueuesOperationsDoesNotStopAResultWaitingThere() {
        let callbackQueue = Queues.serial("busy callbacks", suspended: true)
        let manager = OperationQueueManager()
        let recorder = ResultRecorder<Int>()
        let operation = TestOperation<Int>(
            callBackQueue: callbackQueue, work: { $0.finish(result: .success(7)) },
            completionHandler: recorder.handler("caller"))
        manager.enqueue(operation: operation)
        operation.waitUntilFinished()

        callbackQueue.cancelAllOperations()
        callbackQueue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(1), "the caller never heard back")
        recorder.assertValue("caller", 7)
    }

    /// Issue 9, bug 1, as the adversarial suite ran it: rounds of `cancelAll()` against work that
    /// may already be running, with callbacks on the manager's running queue.
    func testCancelAllNeverLosesACallbackOnTheManagersRunningQueue() {
        for round in 0..<50 {
            let queue = Queues.concurrent("round \(round)")
            let manager = OperationQueueManager(queue: queue)
            let recorder = ResultRecorder<Int>()
            for caller in 0..<4 {
                manager.enqueue(
                    operation: TestOperation(
                        "work \(caller % 2)", callBackQueue: queue,
                        work: { operation in DispatchQueue.global().async { operation.finish(result: .success(1)) } },
                        completionHandler: recorder.handler("caller \(caller)")))
            }
            manager.cancelAll()
            XCTAssertTrue(recorder.waitForCalls(4), "round \(round): a caller never heard back")
            for caller in 0..<4 {
                XCTAssertEqual(recorder.calls(of: "caller \(caller)").count, 1, "round \(round), caller \(caller)")
            }
            queue.waitUntilAllOperationsAreFinished()
        }
    }

    // MARK: Work cancelled before it starts never runs

    private enum CancelRoute: CaseIterable {
        case operationCancel, cancelIdentifier, cancelAll, lastCallerWithdraws
    }

    /// Issue 9, bug 2: `cancel()` told Foundation first, which made an operation waiting on a
    /// dependency ready; its queue could start it before the result was decided, and `main()` ran.
    func testWorkCancelledWhileWaitingOnADependencyNeverRunsAndItsCallerHearsWhyOnce() {
        let dependencies = Queues.concurrent("dependencies")
        var managers: [OperationQueueManager] = []
        // Foundation on Linux keeps an unretained back-reference from a dependency to its
        // dependent, and uses it after the dependency reports finished: every operation lives
        // until the dependencies' queue is drained.
        var keptAlive: [Operation] = []
        for route in CancelRoute.allCases {
            let starts = Counter()
            let recorder = ResultRecorder<Int>()
            for trial in 0..<200 {
                let manager = OperationQueueManager()
                managers.append(manager)
                let pending = BlockOperation {}
                let operation = TestOperation<Int>(
                    "work \(trial)", callBackQueue: callbacks, starts: starts,
                    work: { $0.finish(result: .success(1)) }, completionHandler: recorder.handler("caller \(trial)"))
                operation.addDependency(pending)
                keptAlive += [pending, operation]
                let handle = manager.enqueue(operation: operation)

                switch route {
                case .operationCancel: operation.cancel()
                case .cancelIdentifier: manager.cancel(identifier: "work \(trial)")
                case .cancelAll: manager.cancelAll()
                case .lastCallerWithdraws: handle.withdraw()
                }
                dependencies.addOperation(pending)
                operation.waitUntilFinished()
                pending.waitUntilFinished()
            }
            XCTAssertTrue(recorder.waitForCalls(200))
            XCTAssertEqual(starts.current, 0, "\(route): cancelled work ran")
            for trial in 0..<200 {
                // The work cancelled for everyone, or its only caller withdrawn (Guarantee 11).
                if route == .lastCallerWithdraws {
                    recorder.assertWithdrawn("caller \(trial)")
                } else {
                    recorder.assertCancelled("caller \(trial)")
                }
            }
        }
        dependencies.waitUntilAllOperationsAreFinished()
        managers.forEach { $0.queue.waitUntilAllOperationsAreFinished() }
        withExtendedLifetime(keptAlive) {}
    }
}
