import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantees 16 (forget), 17 (a deadline for one caller), 18 (when the last caller withdraws) and
/// 19 (priority follows the callers) (see the Guarantees article), through the manager, its
/// handles and its async `value` methods, races included.
final class OperationControlsTests: XCTestCase {
    private let callbacks = Queues.concurrent("callbacks")

    /// Work held until `release` opens, finishing with the number of works started so far, so
    /// that callers of different works get different values.
    private func heldWork(starts: Counter, release: Gate, started: Gate? = nil)
        -> @Sendable (TestOperation<Int>) -> Void
    {
        { operation in
            let run = starts.increment()
            TestSupport.heldWork(release: release, started: started) { run }(operation)
        }
    }

    /// A manager whose serial queue holds `host` waiting, so that its priority can be watched.
    private func waitingWork(withCaller: Bool) -> (OperationQueueManager, TestOperation<Int>) {
        let manager = OperationQueueManager(queue: Queues.serial("work", suspended: true))
        let work: @Sendable (TestOperation<Int>) -> Void = { $0.finish(result: .success(1)) }
        let host =
            withCaller
            ? TestOperation<Int>(callBackQueue: callbacks, work: work, completionHandler: { _ in })
            : TestOperation<Int>(work: work)
        manager.enqueue(operation: host)
        return (manager, host)
    }

    // MARK: Guarantee 16: forget

    func testAfterForgetTheNextCallerStartsNewWorkWhileTheCallersAlreadyWaitingGetTheOldResult() {
        let manager = OperationQueueManager()
        let starts = Counter()
        let release = Gate()
        let started = Gate()
        let recorder = ResultRecorder<Int>()
        let work = heldWork(starts: starts, release: release, started: started)
        manager.enqueue(
            operation: TestOperation(callBackQueue: callbacks, work: work, completionHandler: recorder.handler("old a"))
        )
        manager.enqueue(
            operation: TestOperation(callBackQueue: callbacks, work: work, completionHandler: recorder.handler("old b"))
        )
        XCTAssertTrue(started.wait())

        XCTAssertTrue(manager.forget(identifier: "work"))
        let fresh = manager.enqueue(
            operation: TestOperation(callBackQueue: callbacks, work: work, completionHandler: recorder.handler("new")))
        XCTAssertEqual(fresh.admission, .startedWork, "a forgotten work takes no new callers")
        release.open()
        release.open()

        XCTAssertTrue(recorder.waitForCalls(3))
        recorder.assertValue("old a", 1)
        recorder.assertValue("old b", 1)
        recorder.assertValue("new", 2)
        XCTAssertEqual(starts.current, 2)
    }

    func testForgetReportsWhetherAnythingWasInFlight() {
        let manager = OperationQueueManager(queue: Queues.concurrent("work", suspended: true))
        XCTAssertFalse(manager.forget(identifier: "work"))
        manager.enqueue(operation: TestOperation<Int>(work: { $0.finish(result: .success(1)) }))
        XCTAssertTrue(manager.forget(identifier: "work"))
        XCTAssertFalse(manager.forget(identifier: "work"), "forgotten once is forgotten")
        manager.queue.isSuspended = false
        manager.queue.waitUntilAllOperationsAreFinished()
    }

    /// golang/go#31420: forgotten work that ended removed the entry of the work started after it,
    /// so a third caller started a third work instead of joining the second.
    func testForgottenWorkThatEndsLeavesTheNewWorksEntryAlone() {
        let manager = OperationQueueManager()
        let starts = Counter()
        let releaseOld = Gate()
        let releaseNew = Gate()
        let oldStarted = Gate()
        let newStarted = Gate()
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            operation: TestOperation(
                callBackQueue: callbacks, work: heldWork(starts: starts, release: releaseOld, started: oldStarted),
                completionHandler: recorder.handler("old")))
        XCTAssertTrue(oldStarted.wait())
        manager.forget(identifier: "work")
        manager.enqueue(
            operation: TestOperation(
                callBackQueue: callbacks, work: heldWork(starts: starts, release: releaseNew, started: newStarted),
                completionHandler: recorder.handler("new")))
        XCTAssertTrue(newStarted.wait())

        releaseOld.open()
        XCTAssertTrue(recorder.waitForCalls(1))
        let third = manager.enqueue(
            operation: TestOperation(
                callBackQueue: callbacks, work: heldWork(starts: starts, release: releaseNew),
                completionHandler: recorder.handler("third")))
        XCTAssertEqual(third.admission, .joinedWork, "the old work's end removed the new work's entry")
        releaseNew.open()
        XCTAssertTrue(recorder.waitForCalls(2))
        recorder.assertValue("new", 2)
        recorder.assertValue("third", 2)
        XCTAssertEqual(starts.current, 2)
    }

    func testForgetRacingTheOldWorksEndNeverLeavesDecidedWorkInTheIndex() {
        for trial in 0..<300 {
            let manager = OperationQueueManager()
            let recorder = ResultRecorder<Int>()
            let held = Gate()
            let operation = TestOperation<Int>(
                callBackQueue: callbacks,
                work: { operation in
                    DispatchQueue.global().async {
                        _ = held.wait()
                        operation.finish(result: .success(trial))
                    }
                }, completionHandler: recorder.handler("old"))
            manager.enqueue(operation: operation)
            DispatchQueue.concurrentPerform(iterations: 2) { side in
                if side == 0 { held.open() } else { manager.forget(identifier: "work") }
            }
            XCTAssertTrue(recorder.waitForCalls(1))
            let next = manager.enqueue(
                operation: TestOperation(
                    callBackQueue: callbacks, work: { $0.finish(result: .success(-1)) },
                    completionHandler: recorder.handler("next")
                ))
            XCTAssertEqual(next.admission, .startedWork, "trial \(trial): decided work was still indexed")
            XCTAssertTrue(recorder.waitForCalls(1))
            recorder.assertValue("old", trial)
            recorder.assertValue("next", -1)
        }
    }

    // MARK: Guarantee 17: a deadline for one caller

    func testACallerWhoseTimeoutPassesHearsTimedOutOnceAndTheOthersGetTheResult() {
        let manager = OperationQueueManager()
        let starts = Counter()
        let release = Gate()
        let started = Gate()
        let recorder = ResultRecorder<Int>()
        let work = heldWork(starts: starts, release: release, started: started)
        manager.enqueue(
            operation: TestOperation(
                callBackQueue: callbacks, work: work, completionHandler: recorder.handler("patient")))
        XCTAssertTrue(started.wait())
        manager.enqueue(
            identifier: "work", callBackQueue: callbacks, timeout: .milliseconds(20),
            makeOperation: { TestOperation(work: work) }, completionHandler: recorder.handler("hasty handler"))
        manager.enqueue(
            operation: TestOperation(
                callBackQueue: callbacks, work: work, completionHandler: recorder.handler("hasty operation")),
            timeout: .milliseconds(20))

        XCTAssertTrue(recorder.waitForCalls(2), "both timeouts fire while the work is held")
        recorder.assertTimedOut("hasty handler")
        recorder.assertTimedOut("hasty operation")
        release.open()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("patient", 1)
        XCTAssertEqual(manager.statistics.callersTimedOut, 2)
        callbacks.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(recorder.all.count, 3, "a timed-out caller never hears the result as well")
    }

    func testTheLastCallerTimingOutCancelsTheWorkByDefault() {
        let manager = OperationQueueManager()
        let release = Gate()
        let recorder = ResultRecorder<Int>()
        let operation = TestOperation<Int>(
            callBackQueue: callbacks, work: heldWork(starts: Counter(), release: release),
            completionHandler: recorder.handler("only"))
        manager.enqueue(operation: operation, timeout: .milliseconds(10))
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertTimedOut("only")
        XCTAssertTrue(operation.isCancelled, "abandoned work is cancelled before its caller hears")
        release.open()
        manager.queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(manager.statistics.workCancelled, 1)
    }

    func testATimeoutRacingTheResultCallsBackExactlyOnceWithEitherOutcome() {
        let manager = OperationQueueManager()
        let recorder = ResultRecorder<Int>()
        let trials = 500
        for trial in 0..<trials {
            manager.enqueue(
                operation: TestOperation<Int>(
                    "work \(trial)", callBackQueue: callbacks,
                    work: { operation in
                        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(trial % 7 * 150)) {
                            operation.finish(result: .success(trial))
                        }
                    }, completionHandler: recorder.handler("\(trial)")),
                timeout: .microseconds(500))
        }
        XCTAssertTrue(recorder.waitForCalls(trials))
        manager.queue.waitUntilAllOperationsAreFinished()
        var outcomes = Set<String>()
        for trial in 0..<trials {
            switch recorder.onlyResult(of: "\(trial)") {
            case .success(let value)?:
                XCTAssertEqual(value, trial)
                outcomes.insert("value")
            case .failure(let error)?:
                XCTAssertEqual(error as? CoalescingError, .timedOut)
                outcomes.insert("timed out")
            case nil:
                break
            }
        }
        let statistics = manager.statistics
        XCTAssertEqual(statistics.callersServed + statistics.callersTimedOut, trials, "\(statistics)")
    }

    func testAnAwaitingCallerWithATimeoutThrowsTimedOut() async {
        let manager = OperationQueueManager()
        let release = Gate()
        let starts = Counter()
        do {
            _ = try await manager.value(identifier: "work", timeout: .milliseconds(10)) {
                TestOperation<Int>(work: heldWork(starts: starts, release: release))
            }
            XCTFail("the timeout should have passed first")
        } catch {
            XCTAssertEqual(error as? CoalescingError, .timedOut)
        }
        release.open()
    }

    // MARK: Guarantee 18: when the last caller withdraws

    /// An upload: its effect matters even when nobody waits for the answer.
    private final class Upload: CoalescibleOperation<Int>, @unchecked Sendable {
        // @unchecked: adds only immutable properties.
        let release: Gate
        let ran: Counter

        init(
            release: Gate, ran: Counter, callBackQueue: OperationQueue,
            completionHandler: @escaping @Sendable (Result<Int, Error>) -> Void
        ) {
            self.release = release
            self.ran = ran
            super.init(identifier: "upload", callBackQueue: callBackQueue, completionHandler: completionHandler)
        }

        override var abandonedWorkPolicy: AbandonedWorkPolicy { .runToCompletion }

        override func main() {
            DispatchQueue.global().async { [self] in
                _ = release.wait()
                ran.increment()
                finish(result: .success(isCancelled ? -1 : 7))
            }
        }
    }

    func testWorkThatRunsToCompletionGoesOnWhenItsLastCallerWithdrawsAndLaterCallersJoinIt() {
        let manager = OperationQueueManager()
        let release = Gate()
        let ran = Counter()
        let recorder = ResultRecorder<Int>()
        let first = manager.enqueue(
            operation: Upload(
                release: release, ran: ran, callBackQueue: callbacks, completionHandler: recorder.handler("gone")))
        first.withdraw()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertWithdrawn("gone")

        let later = manager.enqueue(
            operation: Upload(
                release: release, ran: ran, callBackQueue: callbacks, completionHandler: recorder.handler("later")))
        XCTAssertEqual(later.admission, .joinedWork, "a caller who arrives while it still runs joins it")
        release.open()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("later", 7)
        XCTAssertEqual(ran.current, 1)
        XCTAssertEqual(manager.statistics.workSucceeded, 1)
    }

    func testTheLastCallerLeavingUnderEachPolicyRacingTheResultCallsBackOnce() {
        for policy in [AbandonedWorkPolicy.cancel, .runToCompletion] {
            let manager = OperationQueueManager()
            let recorder = ResultRecorder<Int>()
            for trial in 0..<300 {
                let release = Gate()
                let operation: CoalescibleOperation<Int> =
                    policy == .cancel
                    ? TestOperation<Int>(
                        "\(trial)", callBackQueue: callbacks,
                        work: { operation in
                            DispatchQueue.global().async {
                                _ = release.wait()
                                operation.finish(result: .success(trial))
                            }
                        }, completionHandler: recorder.handler("\(trial)"))
                    : Upload(
                        release: release, ran: Counter(), callBackQueue: callbacks,
                        completionHandler: recorder.handler("\(trial)"))
                let handle = manager.enqueue(operation: operation)
                DispatchQueue.concurrentPerform(iterations: 2) { side in
                    if side == 0 { release.open() } else { handle.withdraw() }
                }
            }
            XCTAssertTrue(recorder.waitForCalls(300), "\(policy)")
            manager.queue.waitUntilAllOperationsAreFinished()
            callbacks.waitUntilAllOperationsAreFinished()
            for trial in 0..<300 {
                _ = recorder.onlyResult(of: "\(trial)")
            }
        }
    }

    // MARK: Guarantee 19: priority follows the callers

    /// The bug of issue 12: the manager compared a joining caller with the priority recorded at
    /// enqueue, not with what the app had set since, so a less urgent joining caller lowered the work and
    /// a more urgent one failed to raise it.
    func testTheWorkNeverFallsBelowAWaitingCallerNorBelowWhatTheAppSetOnIt() {
        let manager = OperationQueueManager(queue: Queues.serial("work", suspended: true))
        let host = TestOperation<Int>(
            callBackQueue: callbacks, work: { $0.finish(result: .success(1)) }, completionHandler: { _ in })
        manager.enqueue(operation: host)
        host.queuePriority = .veryHigh
        let joiner = TestOperation<Int>(callBackQueue: callbacks, work: { _ in }, completionHandler: { _ in })
        joiner.queuePriority = .high
        manager.enqueue(operation: joiner)
        XCTAssertEqual(host.queuePriority, .veryHigh, "a less urgent joining caller lowered the work")

        host.queuePriority = .low
        XCTAssertEqual(host.queuePriority, .high, "a waiting .high caller keeps the work at .high")
        let another = TestOperation<Int>(callBackQueue: callbacks, work: { _ in }, completionHandler: { _ in })
        another.queuePriority = .high
        manager.enqueue(operation: another)
        XCTAssertEqual(host.queuePriority, .high)

        host.qualityOfService = .utility
        let urgent = TestOperation<Int>(callBackQueue: callbacks, work: { _ in }, completionHandler: { _ in })
        urgent.qualityOfService = .userInitiated
        manager.enqueue(operation: urgent)
        XCTAssertEqual(host.qualityOfService, .userInitiated)
        urgent.cancel()
        XCTAssertEqual(host.qualityOfService, .default, "the remaining callers ask for .default")
        manager.queue.isSuspended = false
        manager.queue.waitUntilAllOperationsAreFinished()
    }

    func testAnUrgentCallerWhoWithdrawsBeforeTheStartTakesItsUrgencyWithIt() {
        let (manager, host) = waitingWork(withCaller: true)
        let urgent = manager.enqueue(
            identifier: "work", callBackQueue: callbacks, priority: OperationPriority(queuePriority: .veryHigh),
            makeOperation: { TestOperation<Int>(work: { _ in }) }, completionHandler: { _ in })
        XCTAssertEqual(host.queuePriority, .veryHigh)
        urgent.withdraw()
        XCTAssertEqual(host.queuePriority, .normal, "the work falls back once its urgent caller left")
        manager.queue.isSuspended = false
        manager.queue.waitUntilAllOperationsAreFinished()
    }

    func testAHandleChangesItsCallersPriorityUpAndDown() {
        let (manager, host) = waitingWork(withCaller: false)
        let cell = manager.enqueue(
            identifier: "work", callBackQueue: callbacks, makeOperation: { TestOperation<Int>(work: { _ in }) },
            completionHandler: { _ in })
        cell.setPriority(OperationPriority(queuePriority: .high, qualityOfService: .userInitiated))
        XCTAssertEqual(host.queuePriority, .high)
        XCTAssertEqual(host.qualityOfService, .userInitiated)
        cell.setPriority(OperationPriority(queuePriority: .low, qualityOfService: .background))
        XCTAssertEqual(host.queuePriority, .normal, "never below what the work's own operation asks")
        XCTAssertEqual(host.qualityOfService, .default)
        manager.queue.isSuspended = false
        manager.queue.waitUntilAllOperationsAreFinished()
    }

    func testAnUrgentCallerWithdrawingAsTheWorkStartsCallsEveryoneBackOnce() {
        let queue = Queues.concurrent("work")
        let manager = OperationQueueManager(queue: queue)
        let recorder = ResultRecorder<Int>()
        for trial in 0..<300 {
            manager.enqueue(
                operation: TestOperation<Int>(
                    "\(trial)", callBackQueue: callbacks, work: { $0.finish(result: .success(trial)) },
                    completionHandler: recorder.handler("host \(trial)")))
            let urgent = manager.enqueue(
                identifier: "\(trial)", callBackQueue: callbacks, priority: OperationPriority(queuePriority: .veryHigh),
                makeOperation: { TestOperation(work: { $0.finish(result: .success(trial)) }) },
                completionHandler: recorder.handler("urgent \(trial)"))
            urgent.withdraw()
        }
        XCTAssertTrue(recorder.waitForCalls(600))
        queue.waitUntilAllOperationsAreFinished()
        for trial in 0..<300 {
            recorder.assertValue("host \(trial)", trial)
            _ = recorder.onlyResult(of: "urgent \(trial)")
        }
    }
}
