import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantees 6 (cancelling the work), 9 (no deadlock: operations with dependencies) and 10 (bad
/// use gets a clear answer: an operation cancelled before it is enqueued) (see the Guarantees
/// article), for operations that wait on a dependency.
///
/// swift-corelibs-foundation keeps a dependency's dependents unretained, and reaches them when the
/// dependency finishes: an operation the library let go of while it was still registered crashed
/// the process then (issue 18). Each such scenario runs in a child process of its own, so that a
/// crash fails its test instead of the whole run.
final class DependencyTests: XCTestCase {
    private let callbacks = Queues.concurrent("callbacks")
    /// Runs the operations that wait on others, and the dependencies the scenarios finish.
    private let dependents = Queues.concurrent("dependents")

    /// The test a child process runs: the scenario the parent named, or nothing in the parent.
    func testTheScenarioTheParentNamesRunsHereInAChildProcess() async throws {
        guard let name = ChildProcess.scenario else { return }
        let scenario = try XCTUnwrap(Scenario(rawValue: name), "no scenario named \(name)")
        await run(scenario)
    }

    // MARK: Guarantee 9: an operation let go of while a dependency still waits is never reached

    func testAJoinerWithAnUnfinishedDependencyCanBeServedAndReleasedBeforeTheDependencyFinishes() throws {
        try assertSurvives(.servedJoiner)
    }

    func testAJoinerWithAnUnfinishedDependencyCanWithdrawAndBeReleasedBeforeTheDependencyFinishes() throws {
        try assertSurvives(.withdrawnJoiner)
    }

    func testAJoinerWithAnUnfinishedDependencyCanTimeOutAndBeReleasedBeforeTheDependencyFinishes() throws {
        try assertSurvives(.timedOutJoiner)
    }

    func testWorkAbandonedByItsOnlyCallersTimeoutCanBeReleasedBeforeItsDependencyFinishes() throws {
        try assertSurvives(.abandonedWork)
    }

    func testWorkCancelledWhileItWaitsOnADependencyCanBeReleasedBeforeTheDependencyFinishes() throws {
        try assertSurvives(.cancelledWork)
    }

    func testAConcurrentOperationCancelledOnAPlainQueueCanBeReleasedBeforeItsDependencyFinishes() throws {
        try assertSurvives(.cancelledOnAPlainQueue)
    }

    func testAnOperationCancelledBeforeItIsEnqueuedCanBeReleasedBeforeItsDependencyFinishes() throws {
        try assertSurvives(.cancelledBeforeEnqueue)
    }

    func testAFactorysCancelledOperationCanBeReleasedBeforeItsDependencyFinishes() throws {
        try assertSurvives(.factoryReturnsCancelled)
    }

    // MARK: Guarantee 10: what depends on an operation cancelled before it was enqueued still runs

    func testOperationsDependingOnAnOperationCancelledBeforeItIsEnqueuedRunAsOnAPlainQueue() {
        let manager = OperationQueueManager()
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let cancelled = TestOperation<Int>(
            callBackQueue: callbacks, starts: starts, work: { $0.finish(result: .success(1)) },
            completionHandler: recorder.handler("a"))
        cancelled.cancel()
        let dependentRan = expectation(description: "the dependent ran")
        let dependent = BlockOperation { dependentRan.fulfill() }
        dependent.addDependency(cancelled)
        dependents.addOperation(dependent)

        XCTAssertEqual(manager.enqueue(operation: cancelled).admission, .ignored)

        wait(for: [dependentRan], timeout: 10)
        XCTAssertTrue(cancelled.isFinished)
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertCancelled("a")
        XCTAssertEqual(starts.current, 0, "a cancelled operation never runs its work")
    }

    func testOperationsDependingOnAnOperationCancelledBeforeItJoinsRun() {
        let manager = OperationQueueManager(queue: Queues.concurrent("work", suspended: true))
        manager.enqueue(operation: TestOperation<Int>(work: { $0.finish(result: .success(1)) }))
        let cancelled = TestOperation<Int>(work: { $0.finish(result: .success(2)) })
        cancelled.cancel()
        let dependentRan = expectation(description: "the dependent ran")
        let dependent = BlockOperation { dependentRan.fulfill() }
        dependent.addDependency(cancelled)
        dependents.addOperation(dependent)

        XCTAssertEqual(manager.enqueue(operation: cancelled).admission, .ignored)
        manager.queue.isSuspended = false

        wait(for: [dependentRan], timeout: 10)
    }

    func testOperationsDependingOnACancelledOperationFromAFactoryRun() {
        let manager = OperationQueueManager()
        let cancelled = TestOperation<Int>(work: { $0.finish(result: .success(1)) })
        cancelled.cancel()
        let dependentRan = expectation(description: "the dependent ran")
        let dependent = BlockOperation { dependentRan.fulfill() }
        dependent.addDependency(cancelled)
        dependents.addOperation(dependent)
        let recorder = ResultRecorder<Int>()

        let handle = manager.enqueue(
            identifier: "work", callBackQueue: callbacks, makeOperation: { cancelled },
            completionHandler: recorder.handler("a"))

        wait(for: [dependentRan], timeout: 10)
        XCTAssertEqual(handle.admission, .ignored)
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertCancelled("a")
    }

    func testOperationsDependingOnACancelledOperationAwaitedAsAValueRun() async {
        let manager = OperationQueueManager()
        let cancelled = TestOperation<Int>(work: { $0.finish(result: .success(1)) })
        cancelled.cancel()
        let dependentRan = expectation(description: "the dependent ran")
        let dependent = BlockOperation { dependentRan.fulfill() }
        dependent.addDependency(cancelled)
        dependents.addOperation(dependent)

        do {
            _ = try await manager.value(of: cancelled)
            XCTFail("a cancelled operation has no value")
        } catch {
            XCTAssertEqual(error as? CoalescingError, .cancelled)
        }
        await fulfillment(of: [dependentRan], timeout: 10)
    }

    // MARK: The scenarios

    enum Scenario: String {
        case servedJoiner, withdrawnJoiner, timedOutJoiner, abandonedWork, cancelledWork, cancelledOnAPlainQueue
        case cancelledBeforeEnqueue, factoryReturnsCancelled
    }

    /// Runs `scenario` in a child process and fails unless it passed there.
    private func assertSurvives(_ scenario: Scenario, file: StaticString = #filePath, line: UInt = #line) throws {
        let outcome = try ChildProcess.run(
            scenario.rawValue,
            entry: "CoalescingOperationsTests.DependencyTests/testTheScenarioTheParentNamesRunsHereInAChildProcess")
        XCTAssertTrue(outcome.passed, "\(scenario): \(outcome)", file: file, line: line)
    }

    /// Builds an operation that waits on `dependency` while the library holds it, lets the library
    /// let go of it, checks that nothing else holds it, then lets `dependency` finish: the moment
    /// Foundation reaches the dependency's dependents.
    private func run(_ scenario: Scenario) async {
        let dependency = BlockOperation {}
        let released = letGo(of: scenario, waitingOn: dependency)
        await waitUntil("the library let go of the operation") { released.isEmpty }
        let finished = expectation(description: "the dependency finished")
        dependency.completionBlock = { finished.fulfill() }
        dependents.addOperation(dependency)
        await fulfillment(of: [finished], timeout: 10)
    }

    /// Plays `scenario` with an operation waiting on `dependency`; returns a weak reference to it.
    private func letGo(of scenario: Scenario, waitingOn dependency: Operation) -> WeakReference {
        let recorder = ResultRecorder<Int>()
        let manager = OperationQueueManager()
        let reference = WeakReference()
        /// An operation waiting on `dependency`; with no caller of its own when `caller` is nil.
        func dependent(_ caller: String? = "dependent") -> TestOperation<Int> {
            let work: @Sendable (TestOperation<Int>) -> Void = { $0.finish(result: .success(2)) }
            let operation =
                caller.map {
                    TestOperation<Int>(callBackQueue: callbacks, work: work, completionHandler: recorder.handler($0))
                }
                ?? TestOperation<Int>(work: work)
            operation.addDependency(dependency)
            reference.operation = operation
            return operation
        }
        // Work in flight that the dependent joins; it finishes when the test says.
        let started = Gate()
        let host = TestOperation<Int>(work: { _ in started.open() })

        switch scenario {
        case .servedJoiner, .withdrawnJoiner, .timedOutJoiner:
            manager.enqueue(operation: host)
            XCTAssertTrue(started.wait())
            let joiner = dependent()
            let timeout: Duration? = scenario == .timedOutJoiner ? .milliseconds(1) : nil
            XCTAssertEqual(manager.enqueue(operation: joiner, timeout: timeout).admission, .joinedWork)
            if scenario == .withdrawnJoiner {
                joiner.cancel()
            }
            if scenario == .servedJoiner {
                host.finish(result: .success(1))
            }
            XCTAssertTrue(recorder.waitForCalls(1))
            switch scenario {
            case .servedJoiner: recorder.assertValue("dependent", 1)
            case .withdrawnJoiner: recorder.assertWithdrawn("dependent")
            default: recorder.assertTimedOut("dependent")
            }
            host.finish(result: .success(1))
        case .abandonedWork, .cancelledWork:
            let timeout: Duration? = scenario == .abandonedWork ? .milliseconds(30) : nil
            manager.enqueue(
                identifier: "work", callBackQueue: callbacks, timeout: timeout, makeOperation: { dependent(nil) },
                completionHandler: recorder.handler("caller"))
            if scenario == .cancelledWork {
                XCTAssertTrue(manager.cancel(identifier: "work"))
            }
            XCTAssertTrue(recorder.waitForCalls(1))
            if scenario == .abandonedWork {
                recorder.assertTimedOut("caller")
            } else {
                recorder.assertCancelled("caller")
            }
            manager.queue.waitUntilAllOperationsAreFinished()
        case .cancelledOnAPlainQueue:
            let queue = OperationQueue()
            let operation = dependent()
            queue.addOperation(operation)
            operation.cancel()
            queue.waitUntilAllOperationsAreFinished()
        case .cancelledBeforeEnqueue:
            let operation = dependent()
            operation.cancel()
            XCTAssertEqual(manager.enqueue(operation: operation).admission, .ignored)
            manager.queue.waitUntilAllOperationsAreFinished()
        case .factoryReturnsCancelled:
            let handle = manager.enqueue(
                identifier: "work", callBackQueue: callbacks,
                makeOperation: {
                    let operation = dependent(nil)
                    operation.cancel()
                    return operation
                }, completionHandler: recorder.handler("caller"))
            XCTAssertEqual(handle.admission, .ignored)
            XCTAssertTrue(recorder.waitForCalls(1))
            recorder.assertCancelled("caller")
            manager.queue.waitUntilAllOperationsAreFinished()
        }
        callbacks.waitUntilAllOperationsAreFinished()
        return reference
    }

    /// Holds the operation a scenario builds weakly, to see when the last strong reference went.
    final class WeakReference: @unchecked Sendable {
        // @unchecked: `operation` is guarded by `lock`.
        private let lock = NSLock()
        private weak var _operation: Operation?

        var operation: Operation? {
            get { lock.withLock { _operation } }
            set { lock.withLock { _operation = newValue } }
        }

        var isEmpty: Bool { operation == nil }
    }
}
