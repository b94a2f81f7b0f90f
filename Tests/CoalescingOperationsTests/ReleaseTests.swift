import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantee 2 (exactly one callback per caller, and the handler let go of after it): an operation
/// whose completion handler captures the operation itself, the blog pattern's cycle, is released
/// once its handler has run, for both kinds of operation, whether the handler runs on the caller's
/// queue or on the thread that finishes the work, and when the operation was cancelled before its
/// queue started it. (Issue 34: the second release kept the handler for ever, and every such
/// operation with it.)
final class ReleaseTests: XCTestCase {
    private let callbacks = Queues.concurrent("callbacks")

    /// Holds what the handler captures: the operation itself, once it exists.
    private final class Capture: @unchecked Sendable {
        // @unchecked: `operation` is written once, before the operation is enqueued, and read by
        // the handler, which the queue runs after that write.
        var operation: Operation?
    }

    /// A coalescible operation that finishes at once with 1 when it runs.
    private final class Coalescible: CoalescibleOperation<Int>, @unchecked Sendable {
        // @unchecked: adds nothing to CoalescibleOperation.
        override func main() { finish(result: .success(1)) }
    }

    /// A plain operation that finishes at once with 1 when it runs.
    private final class Plain: ConcurrentOperation<Int>, @unchecked Sendable {
        // @unchecked: adds nothing to ConcurrentOperation.
        override func main() { finish(result: .success(1)) }
    }

    /// A handler that captures its operation, through `capture`, and opens `called`.
    private func handler(_ capture: Capture, _ called: Gate) -> @Sendable (Result<Int, Error>) -> Void {
        { _ in
            XCTAssertNotNil(capture.operation, "the handler holds its own operation")
            called.open()
        }
    }

    /// Builds an operation whose handler captures it, hands it to `launch` and lets go of it; once
    /// the handler ran and `drain` let the queues go of it too, nothing may hold it any more.
    private func assertReleased(
        _ what: String, count: Int = 1,
        make: (OperationQueue?, @escaping @Sendable (Result<Int, Error>) -> Void) -> Operation,
        onCallerQueue: Bool, launch: ([Operation]) -> Void, drain: () -> Void,
        file: StaticString = #filePath, line: UInt = #line
    ) async {
        let called = Gate()
        var released: [WeakOperation] = []
        do {
            var operations: [Operation] = []
            for _ in 0..<count {
                let capture = Capture()
                let operation = make(onCallerQueue ? callbacks : nil, handler(capture, called))
                capture.operation = operation
                operations.append(operation)
                released.append(WeakOperation(operation))
            }
            launch(operations)
        }
        for _ in 0..<count { XCTAssertTrue(called.wait(), "\(what): the handler ran", file: file, line: line) }
        drain()
        drainCallbacks()
        await waitUntil("\(what): every operation released", file: file, line: line) {
            released.allSatisfy { $0.operation == nil }
        }
    }

    private func drainCallbacks() { callbacks.waitUntilAllOperationsAreFinished() }

    private struct WeakOperation {
        weak var operation: Operation?
        init(_ operation: Operation) { self.operation = operation }
    }

    // MARK: A coalescible operation through a manager

    func testACoalescibleOperationWhoseHandlerCapturesItIsReleasedAfterItsHandlerRan() async {
        for onCallerQueue in [false, true] {
            let manager = OperationQueueManager()
            await assertReleased(
                "coalescible, caller's queue \(onCallerQueue)",
                make: { Coalescible(identifier: "work", callBackQueue: $0, completionHandler: $1) },
                onCallerQueue: onCallerQueue,
                launch: { for operation in $0 { manager.enqueue(operation: operation as! Coalescible) } },
                drain: { manager.queue.waitUntilAllOperationsAreFinished() })
        }
    }

    func testAnOperationThatJoinedAndTheOneItJoinedAreBothReleasedAfterTheirHandlersRan() async {
        for onCallerQueue in [false, true] {
            let queue = Queues.serial("work", suspended: true)
            let manager = OperationQueueManager(queue: queue)
            await assertReleased(
                "joined, caller's queue \(onCallerQueue)", count: 2,
                make: { Coalescible(identifier: "work", callBackQueue: $0, completionHandler: $1) },
                onCallerQueue: onCallerQueue,
                launch: { operations in
                    let admissions = operations.map { manager.enqueue(operation: $0 as! Coalescible).admission }
                    XCTAssertEqual(admissions, [.startedWork, .joinedWork])
                    queue.isSuspended = false
                },
                drain: { queue.waitUntilAllOperationsAreFinished() })
        }
    }

    func testACoalescibleOperationCancelledBeforeItStartedIsReleasedAfterItsHandlerRan() async {
        for onCallerQueue in [false, true] {
            let queue = Queues.serial("work", suspended: true)
            let manager = OperationQueueManager(queue: queue)
            await assertReleased(
                "coalescible cancelled before start, caller's queue \(onCallerQueue)",
                make: { Coalescible(identifier: "work", callBackQueue: $0, completionHandler: $1) },
                onCallerQueue: onCallerQueue,
                launch: { operations in
                    manager.enqueue(operation: operations[0] as! Coalescible)
                    operations[0].cancel()
                },
                drain: {
                    queue.isSuspended = false
                    queue.waitUntilAllOperationsAreFinished()
                })
        }
    }

    // MARK: A plain operation on a plain queue

    func testAPlainOperationWhoseHandlerCapturesItIsReleasedAfterItsHandlerRan() async {
        for onCallerQueue in [false, true] {
            let queue = Queues.concurrent("plain")
            await assertReleased(
                "plain, caller's queue \(onCallerQueue)",
                make: { Plain(callBackQueue: $0, completionHandler: $1) }, onCallerQueue: onCallerQueue,
                launch: { queue.addOperations($0, waitUntilFinished: false) },
                drain: { queue.waitUntilAllOperationsAreFinished() })
        }
    }

    func testAPlainOperationCancelledBeforeItStartedIsReleasedAfterItsHandlerRan() async {
        for onCallerQueue in [false, true] {
            let queue = Queues.serial("plain", suspended: true)
            await assertReleased(
                "plain cancelled before start, caller's queue \(onCallerQueue)",
                make: { Plain(callBackQueue: $0, completionHandler: $1) }, onCallerQueue: onCallerQueue,
                launch: { operations in
                    queue.addOperations(operations, waitUntilFinished: false)
                    operations[0].cancel()
                },
                drain: {
                    queue.isSuspended = false
                    queue.waitUntilAllOperationsAreFinished()
                })
        }
    }
}
