import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// The four priority and misuse findings of issue 34's fuzzer, and issue 39's, each as the
/// smallest program that showed it: Guarantee 19 (a task's priority can only raise the work, and every caller counts
/// with what it brought; one that asks for nothing holds nothing) and Guarantee 10 (only an
/// operation not yet started can be joined by hand).
final class PriorityFindingsTests: XCTestCase {
    /// A manager whose queue holds its work waiting, so that the work's priority can be watched.
    private func waitingManager() -> OperationQueueManager {
        OperationQueueManager(queue: Queues.serial("work", suspended: true))
    }

    // MARK: Finding 1: an escalation raises what the caller brought, never replaces it

    func testAnEscalatedTaskWaitingByIdentifierKeepsTheQueuePriorityItAskedFor() async throws {
        let manager = waitingManager()
        let runner = LockedBox<CoalescibleOperation<Int>?>(nil)
        let asked = OperationPriority(queuePriority: .veryHigh, qualityOfService: .utility)
        let waiter = Task(priority: .low) {
            try await manager.value(identifier: "k", priority: asked) {
                let operation = sevenAt()
                runner.value = operation
                return operation
            }
        }
        await waitUntil("the task waits") { manager.statistics.callersWaiting == 1 }
        waiter.escalatePriority(to: .high)
        await waitUntil("the escalation reaches the work") { runner.value?.qualityOfService == .userInitiated }
        XCTAssertEqual(runner.value?.queuePriority, .veryHigh, "the escalation keeps what the caller asked for")
        manager.queue.isSuspended = false
        let value = try await waiter.value
        XCTAssertEqual(value, 7)
    }

    func testAnEscalatedTaskAwaitingAnOperationKeepsTheOperationsOwnQueuePriority() async throws {
        let manager = waitingManager()
        let host = sevenAt(OperationPriority(queuePriority: .veryLow, qualityOfService: .background))
        let waiter = Task(priority: .low) { try await manager.value(of: host) }
        await waitUntil("the task waits") { manager.statistics.callersWaiting == 1 }
        waiter.escalatePriority(to: .high)
        await waitUntil("the escalation reaches the work") { host.qualityOfService == .userInitiated }
        XCTAssertEqual(host.queuePriority, .veryLow, "a task asks nothing of the queue priority")
        manager.queue.isSuspended = false
        let value = try await waiter.value
        XCTAssertEqual(value, 7)
    }

    // MARK: Finding 2: a task's own priority counts when it arrives

    func testATasksOwnPriorityCountsWhenItWaitsByIdentifier() async throws {
        let manager = waitingManager()
        let runner = LockedBox<CoalescibleOperation<Int>?>(nil)
        let waiter = Task(priority: .high) {
            try await manager.value(identifier: "k") {
                let operation = sevenAt()
                runner.value = operation
                return operation
            }
        }
        // Written once the arrival's lock is released: waited for, not read at once.
        await waitUntil("a .high task counts as .userInitiated") { runner.value?.qualityOfService == .userInitiated }
        manager.queue.isSuspended = false
        let value = try await waiter.value
        XCTAssertEqual(value, 7)
    }

    func testATasksOwnPriorityCountsWhenItAwaitsAnOperation() async throws {
        let manager = waitingManager()
        let host = sevenAt(OperationPriority(qualityOfService: .background))
        let waiter = Task(priority: .medium) { try await manager.value(of: host) }
        await waitUntil("a .medium task counts as .default") { host.qualityOfService == .default }
        manager.queue.isSuspended = false
        let value = try await waiter.value
        XCTAssertEqual(value, 7)
    }

    // MARK: Finding 3: a caller that asks for nothing holds nothing

    func testACallerAskingForNothingLetsTheWorkFollowWhatTheAppSetsOnItsOperation() {
        let manager = waitingManager()
        let runner = LockedBox<CoalescibleOperation<Int>?>(nil)
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            identifier: "k", priority: nil,
            makeOperation: {
                let operation = sevenAt()
                runner.value = operation
                return operation
            }, completionHandler: recorder.handler("caller"))
        runner.value?.queuePriority = .veryLow
        runner.value?.qualityOfService = .background
        XCTAssertEqual(runner.value?.queuePriority, .veryLow, "nil asks for nothing")
        XCTAssertEqual(runner.value?.qualityOfService, .background)
        manager.queue.isSuspended = false
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("caller", 7)
    }

    // MARK: Issue 39's finding: beside the operation that runs the work, the app's floor counts

    /// The first caller, a `.background` task, starts the work asking for `(high, background)`:
    /// the work is written `(high, default)`, its floor `(normal, default)` raised.
    private func raisedByAFirstCaller(
        of manager: OperationQueueManager
    ) async -> (Task<Int, Error>, CoalescibleOperation<Int>) {
        let runner = LockedBox<CoalescibleOperation<Int>?>(nil)
        let asked = OperationPriority(queuePriority: .high, qualityOfService: .background)
        let first = Task(priority: .background) {
            try await manager.value(identifier: "k", priority: asked) {
                let operation = sevenAt()
                runner.value = operation
                return operation
            }
        }
        await waitUntil("the first caller raised the work") { runner.value?.queuePriority == .high }
        return (first, runner.value!)
    }

    func testATaskAwaitingTheOperationThatRunsTheWorkLetsItFallToTheAppsFloorWhenTheOthersLeave() async throws {
        let manager = waitingManager()
        let (first, host) = await raisedByAFirstCaller(of: manager)
        let second = Task(priority: .medium) { try await manager.value(of: host) }
        await waitUntil("the second task waits") { manager.statistics.callersWaiting == 2 }
        first.cancel()
        await XCTAssertThrowsCancellation(try await first.value)
        await waitUntil("the first caller took its urgency with it") { host.queuePriority == .normal }
        XCTAssertEqual(host.qualityOfService, .default, "a .medium task asks for .default")
        manager.queue.isSuspended = false
        let value = try await second.value
        XCTAssertEqual(value, 7)
    }

    func testACallerAskingForNothingBesideTheOperationThatRunsTheWorkHoldsNothing() async throws {
        let manager = waitingManager()
        let (first, host) = await raisedByAFirstCaller(of: manager)
        XCTAssertTrue(manager.forget(identifier: "k"))
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            identifier: "k", priority: nil, makeOperation: { host }, completionHandler: recorder.handler("second"))
        XCTAssertEqual(manager.statistics.callersWaiting, 2, "the second caller waits for the running operation")
        first.cancel()
        await XCTAssertThrowsCancellation(try await first.value)
        await waitUntil("the first caller took its urgency with it") { host.queuePriority == .normal }
        XCTAssertEqual(host.qualityOfService, .default, "the app's floor, not what was last written")
        manager.queue.isSuspended = false
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("second", 7)
    }

    // MARK: Finding 4: only an operation not yet started can be joined by hand

    @available(*, deprecated, message: "tests the deprecated coalesce(operation:)")
    func testCoalesceRefusesAHostItsManagersQueueHasStarted() {
        let manager = OperationQueueManager()
        let started = Gate()
        let release = Gate()
        let recorder = ResultRecorder<Int>()
        let host = TestOperation<Int>(
            "k", callBackQueue: Queues.serial("callbacks"), work: heldWork(release: release, started: started) { 1 },
            completionHandler: recorder.handler("host"))
        manager.enqueue(operation: host)
        XCTAssertTrue(started.wait())
        let joining = TestOperation<Int>(
            "k", callBackQueue: Queues.serial("joining callbacks"), work: { $0.finish(result: .success(2)) },
            completionHandler: recorder.handler("joining"))
        XCTAssertFalse(host.coalesce(operation: joining), "the host has started")
        release.open()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("host", 1)
        XCTAssertTrue(joining.isReady, "the joining was left as it was: fresh")
    }
}

/// An operation with no caller of its own that finishes with 7, at `priority`.
private func sevenAt(_ priority: OperationPriority = OperationPriority()) -> TestOperation<Int> {
    let operation = TestOperation<Int>("k", work: { $0.finish(result: .success(7)) })
    operation.queuePriority = priority.queuePriority
    operation.qualityOfService = priority.qualityOfService
    return operation
}
