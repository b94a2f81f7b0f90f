import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantee 8 (see the Guarantees article): joining costs O(1) and a huge fan-out neither grows the stack nor gets lost.
/// (Costs are measured in `Benchmarks/`; these tests pin down that the work completes.)
final class ScaleTests: XCTestCase {
    func testAMillionCallersJoinedOntoOneOperationAreAllCalledBack() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let callbacks = Queues.serial("callbacks")
        let served = Counter()
        let allServed = Gate()
        let callers = 1_000_000
        let handler: @Sendable (Result<Int, Error>) -> Void = { result in
            if (try? result.get()) == 5, served.increment() == callers {
                allServed.open()
            }
        }
        let make = { TestOperation<Int> { $0.finish(result: .success(5)) } as CoalescibleOperation<Int> }

        for _ in 0..<callers {
            manager.enqueue(
                identifier: "work", callBackQueue: callbacks, makeOperation: make, completionHandler: handler)
        }
        queue.isSuspended = false

        XCTAssertTrue(allServed.wait(seconds: 120))
        XCTAssertEqual(served.current, callers)
    }

    func testAHundredThousandJoinedOperationsOnEightQueuesAreAllServed() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let callbackQueues = (0..<8).map { Queues.serial("callbacks \($0)") }
        let starts = Counter()
        let served = Counter()
        let allServed = Gate()
        let callers = 100_000
        let handler: @Sendable (Result<Int, Error>) -> Void = { _ in
            if served.increment() == callers {
                allServed.open()
            }
        }
        let operations = (0..<callers).map { index in
            TestOperation<Int>(
                callBackQueue: callbackQueues[index % 8], starts: starts, work: { $0.finish(result: .success(1)) },
                completionHandler: handler)
        }

        let admissions = operations.map { manager.enqueue(operation: $0).admission }
        queue.isSuspended = false

        XCTAssertTrue(allServed.wait(seconds: 120))
        XCTAssertEqual(admissions.filter { $0 == .joinedWork }.count, callers - 1)
        XCTAssertEqual(starts.current, 1)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(operations.allSatisfy(\.isFinished))
    }

    func testJoiningFindsItsWorkAmongTenThousandPendingOperations() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        let callbacks = Queues.concurrent("callbacks")
        for index in 0..<10_000 {
            manager.enqueue(
                operation: TestOperation<Int>(
                    "work \(index)", callBackQueue: callbacks, work: { $0.finish(result: .success(index)) },
                    completionHandler: { _ in }))
        }

        let joined = manager.enqueue(
            operation: TestOperation<Int>(
                "work 9876", callBackQueue: callbacks, work: { $0.finish(result: .success(-1)) },
                completionHandler: recorder.handler("joining")))
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(joined.admission, .joinedWork)
        recorder.assertValue("joining", 9876)
    }
}
