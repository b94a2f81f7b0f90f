import Foundation
import TestSupport
import XCTest

@testable import CoalescingOperations

/// Guarantee 11 (see the Guarantees article): the async/await entry to the manager coalesces the same
/// way; a cancelled task withdraws its caller, which hears `CancellationError`, and work cancelled
/// for everyone throws `CoalescingError.cancelled`.
final class OperationQueueManagerAsyncTests: XCTestCase {
    func testAsyncCallersAndHandlerCallersShareOneRun() async throws {
        let manager = OperationQueueManager()
        let gate = Gate()
        let started = Gate()
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let first = Task {
            try await manager.value(of: gatedOperation(1, gate: gate, starts: starts, started: started))
        }
        XCTAssertTrue(started.wait())
        let second = Task {
            try await manager.value(identifier: "work") { TestOperation<Int>(starts: starts) { _ in } }
        }
        manager.enqueue(
            operation: TestOperation<Int>(
                callBackQueue: Queues.concurrent("callbacks"), starts: starts, work: { _ in },
                completionHandler: recorder.handler("handler")))
        await waitUntilJoined(manager, count: 3)

        gate.open()
        let values = try await [first.value, second.value]

        XCTAssertEqual(values, [1, 1])
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("handler", 1)
        XCTAssertEqual(starts.current, 1)
    }

    func testCancellingTheAwaitingTaskWithdrawsOnlyThatCaller() async throws {
        let manager = OperationQueueManager()
        let gate = Gate()
        let started = Gate()
        let starts = Counter()
        let staying = Task {
            try await manager.value(of: gatedOperation(5, gate: gate, starts: starts, started: started))
        }
        XCTAssertTrue(started.wait())
        let leaving = Task { try await manager.value(of: gatedOperation(0, gate: gate, starts: starts)) }
        await waitUntilJoined(manager, count: 2)

        leaving.cancel()
        await XCTAssertThrowsCancellation(try await leaving.value)  // while the work is still held
        gate.open()

        let value = try await staying.value
        XCTAssertEqual(value, 5)
        XCTAssertEqual(starts.current, 1)
    }

    func testWhenEveryAwaitingTaskIsCancelledTheWorkIsCancelled() async throws {
        let manager = OperationQueueManager()
        let gate = Gate()
        let started = Gate()
        let starts = Counter()
        let host = gatedOperation(1, gate: gate, starts: starts, started: started)
        let callers = [
            Task { try await manager.value(of: host) },
            Task { try await manager.value(of: gatedOperation(1, gate: gate, starts: starts)) },
        ]
        XCTAssertTrue(started.wait())
        await waitUntilJoined(manager, count: 2)

        callers.forEach { $0.cancel() }
        for caller in callers {
            await XCTAssertThrowsCancellation(try await caller.value)
        }

        XCTAssertTrue(host.isCancelled)
        gate.open()
    }

    func testCancellingTheWorkThrowsCoalescingErrorCancelledToTheAwaitingCaller() async throws {
        let manager = OperationQueueManager()
        let gate = Gate()
        let started = Gate()
        let caller = Task {
            try await manager.value(of: gatedOperation(1, gate: gate, starts: Counter(), started: started))
        }
        XCTAssertTrue(started.wait())

        manager.cancel(identifier: "work")

        await XCTAssertThrowsCoalescingError(.cancelled, try await caller.value)
        gate.open()
    }

    func testAnAlreadyCancelledTaskEnqueuesNothing() async throws {
        let manager = OperationQueueManager()
        let starts = Counter()
        let made = Counter()
        let caller = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await manager.value(identifier: "work") {
                made.increment()
                return TestOperation<Int>(starts: starts) { $0.finish(result: .success(1)) }
            }
        }

        await XCTAssertThrowsCancellation(try await caller.value)
        XCTAssertEqual(made.current, 0)
        XCTAssertEqual(starts.current, 0)
    }

    func testWorkThatFailsThrowsItsErrorToEveryAwaitingCaller() async throws {
        struct Failure: Error {}
        let manager = OperationQueueManager()
        do {
            _ = try await manager.value(of: TestOperation<Int> { $0.finish(result: .failure(Failure())) })
            XCTFail("expected the work's error")
        } catch {
            XCTAssertTrue(error is Failure)
        }
    }

    /// Waits until `count` callers wait for the work with identifier "work".
    private func waitUntilJoined(_ manager: OperationQueueManager, count: Int) async {
        await waitUntil("\(count) callers joined") {
            manager.callerCount(identifier: "work", valueType: Int.self) == count
        }
    }
}

/// An operation held until `gate` opens, finishing with `value`, counting how often it starts.
private func gatedOperation(_ value: Int, gate: Gate, starts: Counter, started: Gate? = nil) -> TestOperation<Int> {
    TestOperation<Int>(starts: starts, work: heldWork(release: gate, started: started) { value })
}
