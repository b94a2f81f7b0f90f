import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantees 21 (statistics are exact), 22 (events: in order, no lock held, the observer may
/// call back, released with its manager) and 23 (stalled work is reported) (see the Guarantees
/// article), for ``OperationQueueManager``.
final class OperationObservationTests: XCTestCase {
    private let callbacks = Queues.concurrent("callbacks")

    func testStatisticsCountWorkCallersAndOutcomes() {
        let manager = OperationQueueManager()
        let release = Gate()
        let started = Gate()
        let recorder = ResultRecorder<Int>()
        let work = heldWork(release: release, started: started) { 5 }
        manager.enqueue(
            operation: TestOperation(callBackQueue: callbacks, work: work, completionHandler: recorder.handler("a")))
        XCTAssertTrue(started.wait())
        manager.enqueue(
            operation: TestOperation(callBackQueue: callbacks, work: work, completionHandler: recorder.handler("b")))
        let leaving = manager.enqueue(
            identifier: "work", callBackQueue: callbacks, makeOperation: { TestOperation<Int>(work: work) },
            completionHandler: recorder.handler("c"))
        XCTAssertEqual(manager.statistics.workInFlight, 1)
        leaving.withdraw()
        release.open()
        XCTAssertTrue(recorder.waitForCalls(3))

        manager.enqueue(
            operation: TestOperation<Int>(
                "other", callBackQueue: callbacks, work: { $0.finish(result: .failure(URLError(.timedOut))) },
                completionHandler: recorder.handler("d")))
        XCTAssertTrue(recorder.waitForCalls(1))
        manager.queue.waitUntilAllOperationsAreFinished()

        let statistics = manager.statistics
        XCTAssertEqual(statistics.workStarted, 2)
        XCTAssertEqual(statistics.callersJoined, 2)
        XCTAssertEqual(statistics.callersWithdrawn, 1)
        XCTAssertEqual(statistics.callersServed, 3)
        XCTAssertEqual(statistics.workSucceeded, 1)
        XCTAssertEqual(statistics.workFailed, 1)
        XCTAssertEqual(statistics.workInFlight, 0)
        XCTAssertEqual(statistics.callersArrived, 4)
        XCTAssertEqual(statistics.callersJoined, 2, "each caller that joined spared a run, served or not")
    }

    func testTheObserverSeesEachStepOnceInTheOrderItHappened() {
        let log = EventLog()
        let manager = OperationQueueManager(observer: log.observer)
        let release = Gate()
        let started = Gate()
        let recorder = ResultRecorder<Int>()
        let work = heldWork(release: release, started: started) { 5 }
        manager.enqueue(
            operation: TestOperation(callBackQueue: callbacks, work: work, completionHandler: recorder.handler("a")))
        XCTAssertTrue(started.wait())
        manager.enqueue(
            operation: TestOperation(callBackQueue: callbacks, work: work, completionHandler: recorder.handler("b")))
        manager.enqueue(
            operation: TestOperation(callBackQueue: callbacks, work: work, completionHandler: recorder.handler("c"))
        ).withdraw()
        release.open()
        XCTAssertTrue(recorder.waitForCalls(3))
        manager.queue.waitUntilAllOperationsAreFinished()

        XCTAssertEqual(log.steps, ["started", "joined 2", "joined 3", "withdrawn withdrawn", "ended succeeded 2"])
        guard case .workEnded(let key, _, _, _, _, let duration)? = log.events.value.last else { return XCTFail() }
        XCTAssertEqual(key, "work")
        XCTAssertGreaterThan(duration, .zero)
    }

    func testTheManagersEventsNumberEachWorkAndAFailuresEndCarriesItsError() {
        // Guarantee 22, for operations.
        struct Refused: Error {}
        let log = EventLog()
        let manager = OperationQueueManager(observer: log.observer)
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            operation: TestOperation(
                "refused", callBackQueue: callbacks, work: { $0.finish(result: .failure(Refused())) },
                completionHandler: recorder.handler("refused")))
        XCTAssertTrue(recorder.waitForCalls(1))
        manager.enqueue(
            operation: TestOperation(
                "accepted", finishingWith: 1, callBackQueue: callbacks, recorder: recorder, caller: "accepted"))
        XCTAssertTrue(recorder.waitForCalls(1))
        manager.queue.waitUntilAllOperationsAreFinished()

        let ends = log.events.value.compactMap { event -> (String, Int, (any Error)?)? in
            if case .workEnded(let key, let work, _, let error, _, _) = event { (key, work, error) } else { nil }
        }
        XCTAssertEqual(ends.map(\.0), ["refused", "accepted"])
        XCTAssertEqual(ends.map(\.1), [1, 2])
        XCTAssertTrue(ends[0].2 is Refused)
        XCTAssertNil(ends[1].2)
    }

    func testAnObserverThatCallsBackIntoTheManagerDoesNotDeadlock() {
        let reentered = Counter()
        let box = LockedBox<OperationQueueManager?>(nil)
        let manager = OperationQueueManager(observer: { event in
            guard case .workStarted(let key, _) = event, key == "first", let manager = box.value else { return }
            reentered.increment()
            manager.enqueue(operation: TestOperation<Int>("second", work: { $0.finish(result: .success(2)) }))
            manager.cancel(identifier: "nothing")
            _ = manager.statistics
        })
        box.value = manager
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            operation: TestOperation<Int>(
                "first", callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                completionHandler: recorder.handler("first")))
        XCTAssertTrue(recorder.waitForCalls(1))
        manager.queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(reentered.current, 1)
        XCTAssertEqual(manager.statistics.workStarted, 2)
        box.value = nil
    }

    func testDroppingTheManagerReleasesItsObserver() async {
        let released = LockedBox(false)
        final class Watched: Sendable {
            let released: LockedBox<Bool>
            init(_ released: LockedBox<Bool>) { self.released = released }
            deinit { released.value = true }
        }
        do {
            let watched = Watched(released)
            let manager = OperationQueueManager(observer: { _ in withExtendedLifetime(watched) {} })
            let recorder = ResultRecorder<Int>()
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                    completionHandler: recorder.handler("a")))
            XCTAssertTrue(recorder.waitForCalls(1))
        }
        // The thread that settled the work lets go of the manager just after the callback.
        await waitUntil("the manager and its observer are released") { released.value }
    }

    func testWorkInFlightPastTheStallThresholdWithCallersWaitingIsReportedOnce() {
        let log = EventLog()
        let manager = OperationQueueManager(observer: log.observer, stallThreshold: .milliseconds(20))
        let release = Gate()
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            operation: TestOperation<Int>(
                callBackQueue: callbacks,
                work: { operation in
                    DispatchQueue.global().async {
                        _ = release.wait()
                        operation.finish(result: .success(1))
                    }
                }, completionHandler: recorder.handler("waiting")))
        XCTAssertTrue(log.stalled.wait())
        release.open()
        XCTAssertTrue(recorder.waitForCalls(1))
        manager.queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.steps.filter { $0.hasPrefix("stalled") }, ["stalled 1"])
    }

    func testAManagerWithoutObserverOrThresholdRecordsNoEventsAndStillCounts() {
        let manager = OperationQueueManager()
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            operation: TestOperation<Int>(
                callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                completionHandler: recorder.handler("a")))
        XCTAssertTrue(recorder.waitForCalls(1))
        manager.queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(manager.statistics.workSucceeded, 1)
        XCTAssertEqual(manager.statistics.callersServed, 1)
    }
}
