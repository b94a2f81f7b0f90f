import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// The first release's spellings, deprecated but kept compiling, still keep their promises: the
/// deprecated `enqueue(_:)` never adds an operation twice nor one already run (Guarantee 10); an
/// operation that others joined by hand with the deprecated `coalesce(operation:)` refuses what
/// cannot join, runs as work of its own beside identical work, is counted by no manager (10), and
/// loses no callback under load (2; issue 9); and the renamed spellings do what their new names do
/// (5, 11 and 15). See the Guarantees article.
///
/// The tests are deprecated themselves, so that their uses of the deprecated spellings draw no
/// warning: the annotation is on an extension of the class rather than on the class, since the
/// code that SwiftPM generates on Linux to list the tests extends the class, and that extension
/// would draw the warning (an error under `-warnings-as-errors`) were the class deprecated.
final class DeprecatedSpellingsTests: XCTestCase {
    fileprivate let callbacks = Queues.concurrent("callbacks")
}

@available(*, deprecated, message: "tests the deprecated spellings, which it uses on purpose")
extension DeprecatedSpellingsTests {

    // MARK: Guarantee 21: callersSaved, deprecated, is callersJoined

    func testCallersSavedIsTheNumberOfCallersThatJoined() {
        let manager = OperationQueueManager(queue: Queues.concurrent("work", suspended: true))
        for _ in 0..<3 {
            manager.enqueue(identifier: "k", makeOperation: { CoalescibleOperation<Int>(identifier: "k") }) { _ in }
        }
        XCTAssertEqual(manager.statistics.callersSaved, 2)
        XCTAssertEqual(manager.statistics.callersSaved, manager.statistics.callersJoined)
        manager.cancelAll()
    }

    // MARK: Guarantee 10: enqueue(_:) never adds an operation twice, nor one already run

    func testTheDeprecatedEnqueueIgnoresACoalescibleOperationAlreadyEnqueuedOrFinished() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let starts = Counter()
        let recorder = ResultRecorder<Int>()
        let enqueued = TestOperation(
            finishingWith: 1, callBackQueue: callbacks, starts: starts, recorder: recorder, caller: "enqueued")

        XCTAssertEqual(manager.enqueue(operation: enqueued).admission, .startedWork)
        manager.enqueue(enqueued as Operation)
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(recorder.waitForCalls(1))

        manager.enqueue(enqueued as Operation)
        manager.queue.waitUntilAllOperationsAreFinished()
        callbacks.waitUntilAllOperationsAreFinished()

        XCTAssertEqual(starts.current, 1)
        recorder.assertValue("enqueued", 1)
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
            // @unchecked: restated as Swift requires of an `Operation` subclass; adds only a `let`.
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

    // MARK: Guarantees 2 and 10: coalesce(operation:)

    func testCoalesceRefusesWhatCannotJoin() {
        let recorder = ResultRecorder<Int>()
        let host = TestOperation(finishingWith: 1, callBackQueue: callbacks, recorder: recorder, caller: "host")
        let joining = TestOperation(finishingWith: 1, callBackQueue: callbacks, recorder: recorder, caller: "joining")
        let other = TestOperation(finishingWith: 1, callBackQueue: callbacks, recorder: recorder, caller: "other")

        XCTAssertFalse(host.coalesce(operation: host), "an operation cannot join itself")
        XCTAssertTrue(host.coalesce(operation: joining))
        XCTAssertFalse(host.coalesce(operation: joining), "already joined")
        XCTAssertFalse(other.coalesce(operation: host), "an operation that others joined cannot join")
        XCTAssertFalse(joining.coalesce(operation: other), "an operation that joined takes nobody along")

        host.start()
        XCTAssertTrue(recorder.waitForCalls(2))
        XCTAssertFalse(host.coalesce(operation: other), "finished work takes no more callers")
        recorder.assertValue("host", 1)
        recorder.assertValue("joining", 1)
        XCTAssertEqual(recorder.calls(of: "other").count, 0)
    }

    /// Issue 9, bug 3: the manager refused to fold `b`, which carried `c`, into identical work in
    /// flight, and then returned `.ignored` without queuing `b`: neither caller heard back.
    func testAnOperationCarryingHandCoalescedOperationsRunsAsWorkOfItsOwnBesideIdenticalWork() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        let starts = Counter()
        func operation(_ caller: String, value: Int) -> TestOperation<Int> {
            TestOperation(
                "k", finishingWith: value, callBackQueue: callbacks, starts: starts, recorder: recorder, caller: caller)
        }
        manager.enqueue(operation: operation("a", value: 1))
        let b = operation("b", value: 2)
        XCTAssertTrue(b.coalesce(operation: operation("c", value: 3)))

        XCTAssertEqual(manager.enqueue(operation: b).admission, .startedWork)
        XCTAssertEqual(
            manager.enqueue(operation: operation("d", value: 4)).admission, .joinedWork,
            "later callers still join the work the index holds")
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(4))
        XCTAssertEqual(starts.current, 2)
        recorder.assertValue("a", 1)
        recorder.assertValue("b", 2)
        recorder.assertValue("c", 2)
        recorder.assertValue("d", 1)
    }

    func testWorkCoalescedByHandIsCountedByNoManagerSoArrivalsStillEqualDepartures() {
        let manager = OperationQueueManager()
        let recorder = ResultRecorder<Int>()
        let host = TestOperation<Int>(
            callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
            completionHandler: recorder.handler("host"))
        XCTAssertTrue(
            host.coalesce(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, work: { _ in }, completionHandler: recorder.handler("joining"))))
        XCTAssertEqual(manager.enqueue(operation: host).admission, .startedWork)
        XCTAssertTrue(recorder.waitForCalls(2))
        manager.queue.waitUntilAllOperationsAreFinished()

        let statistics = manager.statistics
        XCTAssertEqual(statistics.callersArrived, statistics.callersServed)
        XCTAssertEqual(statistics.callersArrived, 0)
    }

    /// The mix of `StressTests`, in which a few callers' operations first take another along by
    /// hand before the manager sees them; smaller, since the full mix runs there.
    func testRandomInterleavingsWithOperationsJoinedByHandLoseNoCallbackAndDoubleNone() {
        let environment = ProcessInfo.processInfo.environment
        StressTests.runMix(
            callers: environment["COALESCING_STRESS_OPERATIONS"].flatMap(Int.init) ?? 20_000,
            coalesceByHand: { host, joining in host.coalesce(operation: joining) })
    }

    // MARK: Guarantees 5, 11 and 15: the renamed spellings

    func testTheHandlesCancelWithdrawsItsCallerOnlyAsWithdrawDoes() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            operation: TestOperation(finishingWith: 1, callBackQueue: callbacks, recorder: recorder, caller: "staying"))

        manager.enqueue(
            operation: TestOperation(finishingWith: 1, callBackQueue: callbacks, recorder: recorder, caller: "leaving")
        ).cancel()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertWithdrawn("leaving")
        queue.isSuspended = false

        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("staying", 1)
    }

    func testTheErrorsOldNamesAreCoalescingError() {
        let operationError: ConcurrentOperationError = .cancelled
        let blogError: CoalescibleOperationError = .timedOut
        XCTAssertEqual(operationError, CoalescingError.cancelled)
        XCTAssertEqual(blogError, CoalescingError.timedOut)
    }

    func testDeduplicatedReturnsWhatValueReturnsOnBothTaskCoalescers() async throws {
        let inFlight = InFlightTaskCoalescer<String, Int>()
        let prefetchable = PrefetchableTaskCoalescer<String, Int>(prefetchTimeout: .seconds(30))

        let plain = try await inFlight.deduplicated(key: "k") { 1 }
        try await prefetchable.prefetch(key: "k") { 2 }
        let prefetched = try await prefetchable.deduplicated(key: "k") { 3 }
        let next = try await prefetchable.deduplicated(key: "k") { 4 }

        XCTAssertEqual([plain, prefetched, next], [1, 2, 4], "the prefetched result, for one consumer only")
    }
}
