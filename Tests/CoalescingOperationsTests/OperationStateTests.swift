import Foundation
import XCTest

@testable import CoalescingOperations

/// Guarantees 2, 5, 6, 9, 10, 18 and 19 (see the Guarantees article) in the state machine behind every
/// operation, on its own: no queue, no threads, each transition and the action it returns.
final class OperationStateTests: XCTestCase {
    private typealias State = OperationState<Int>

    private static func handler(_ queue: OperationQueue? = nil) -> Caller<Int> {
        .handler({ _ in }, queue: queue)
    }

    private static func admission(own: OperationPriority = OperationPriority()) -> Admission {
        Admission(registration: nil, priority: PriorityTracker(own: own))
    }

    func testAQueuedOperationRunsAndFinishesOnceItsResultIsHandedOut() {
        var state = State(caller: Self.handler())
        XCTAssertTrue(state.claim(Self.admission()))
        guard case .run = state.start() else { return XCTFail("a claimed operation runs when started") }
        XCTAssertTrue(state.isExecuting)

        XCTAssertEqual(state.decide()?.callers.live, 1)
        XCTAssertNil(state.decide(), "only the first decision wins")
        guard case .finish(let keys, neverRan: false) = state.settled() else {
            return XCTFail("an executing operation finishes")
        }
        XCTAssertEqual(keys, ["isExecuting", "isFinished"])
        state.markFinished()
        XCTAssertTrue(state.isFinished)
        guard case .none = state.start() else { return XCTFail("starting again changes nothing") }
    }

    func testAResultDecidedBeforeTheStartFinishesTheOperationOnlyWhenTheQueueStartsIt() {
        var state = State(caller: Self.handler())
        XCTAssertTrue(state.claim(Self.admission()))
        XCTAssertNotNil(state.decide())
        guard case .awaitStart = state.settled() else { return XCTFail("not started: the queue's start() finishes it") }
        XCTAssertFalse(state.isFinished, "a queued operation never reports finished before its start")

        guard case .finishWithoutRunning = state.start() else { return XCTFail("main() must not run") }
        XCTAssertTrue(state.isFinished)
    }

    func testAStartWhileTheResultIsHandedOutLeavesTheFinishToSettling() {
        var state = State(caller: Self.handler())
        XCTAssertNotNil(state.decide())
        guard case .finishBySettling = state.start() else { return XCTFail("main() must not run for a decided result") }
        XCTAssertTrue(state.isExecuting)
        guard case .finish(let keys, _) = state.settled() else { return XCTFail("settling finishes it") }
        XCTAssertEqual(keys, ["isExecuting", "isFinished"])
    }

    func testAnOperationCancelledBeforeAnythingClaimedItIsHandedToAQueueOnceAndFinishesThereWithoutRunning() {
        var state = State(caller: Self.handler())
        XCTAssertNotNil(state.decide())
        XCTAssertFalse(state.claim(Self.admission()), "a decided operation is never claimed as work")
        XCTAssertTrue(state.claimDecidedBeforeEnqueue())
        XCTAssertFalse(state.claimDecidedBeforeEnqueue(), "it reaches a queue once")
        guard case .awaitStart = state.settled() else { return XCTFail("the queue's start() finishes it") }
        guard case .finishWithoutRunning = state.start() else { return XCTFail("main() must not run") }

        var queued = State(caller: Self.handler())
        XCTAssertTrue(queued.claim(Self.admission()))
        XCTAssertNotNil(queued.decide())
        XCTAssertFalse(queued.claimDecidedBeforeEnqueue(), "an operation already on a queue is not added again")
        var open = State(caller: Self.handler())
        XCTAssertFalse(open.claimDecidedBeforeEnqueue(), "an open operation is claimed as work instead")
    }

    func testWithdrawingRemovesACallerOnceAndTheLastOneAbandonsTheWork() {
        var state = State(caller: Self.handler())
        XCTAssertTrue(state.claim(Self.admission()))
        guard case .joined(let second, let callers, _) = state.join(Self.handler(), priority: nil) else {
            return XCTFail("open work takes callers")
        }
        XCTAssertEqual(callers, 2)

        guard case .withdrew(let caller?, _) = state.withdraw(second, reason: .withdrawn, policy: .cancel) else {
            return XCTFail("the second caller withdraws")
        }
        guard case .handler = caller else { return XCTFail("the withdrawn caller is handed back to be told") }
        guard case .none = state.withdraw(second, reason: .withdrawn, policy: .cancel) else {
            return XCTFail("withdrawing twice does nothing")
        }
        guard case .abandoned(_?, let settlement) = state.withdraw(0, reason: .withdrawn, policy: .cancel) else {
            return XCTFail("the last caller abandons the work")
        }
        XCTAssertEqual(settlement.callers.live, 0)
        XCTAssertNil(state.decide(), "abandoning decided the result")
    }

    func testTheLastCallerLeavingWorkThatRunsToCompletionLeavesItRunningAndOpen() {
        var state = State(caller: Self.handler())
        XCTAssertTrue(state.claim(Self.admission()))
        _ = state.start()
        guard case .withdrew(_?, _) = state.withdraw(0, reason: .withdrawn, policy: .runToCompletion) else {
            return XCTFail("the caller withdraws, the work runs on")
        }
        XCTAssertTrue(state.isExecuting)
        guard case .joined = state.join(Self.handler(), priority: nil) else {
            return XCTFail("a caller who arrives while it still runs joins it")
        }
        XCTAssertEqual(state.decide()?.callers.live, 1)
    }

    func testNothingJoinsOrWithdrawsOnceTheResultIsDecided() {
        var state = State(caller: Self.handler())
        XCTAssertNotNil(state.decide())
        guard case .refused = state.join(Self.handler(), priority: nil) else {
            return XCTFail("decided work is closed")
        }
        guard case .none = state.withdraw(0, reason: .withdrawn, policy: .cancel) else {
            return XCTFail("the caller has its result")
        }
    }

    func testAnAbsorbedOperationWhoseLastCallerLeavesIsDecidedAndLeavesItsHost() {
        let host = CoalescibleOperation<Int>(identifier: "host")
        var state = State(caller: Self.handler())
        XCTAssertEqual(state.freshness, .fresh)
        state.becomeAbsorbed(by: host, slot: 3)
        XCTAssertEqual(state.freshness, .unavailable, "an absorbed operation rides on nothing else")
        guard case .leftHost(_?, let settlement) = state.withdraw(0, reason: .withdrawn, policy: .cancel) else {
            return XCTFail("its last caller takes it out of the host's work")
        }
        XCTAssertTrue(settlement.host?.operation === host)
        XCTAssertEqual(settlement.host?.slot, 3)
        guard case .finish(let keys, neverRan: true) = state.settled() else {
            return XCTFail("an absorbed operation finishes, and lets go of its dependencies first")
        }
        XCTAssertEqual(keys, ["isFinished"])
    }

    func testCallersOnOneQueueAreHandedTheResultAsOneListAndASecondQueueSplitsThem() {
        let shared = OperationQueue()
        var callers = Callers<Int>()
        _ = callers.add(Self.handler(shared), priority: nil)
        _ = callers.add(Self.handler(shared), priority: nil)
        guard case .one(let queue) = callers.queues, queue === shared else { return XCTFail("one queue") }
        _ = callers.add(Self.handler(OperationQueue()), priority: nil)
        guard case .several = callers.queues else { return XCTFail("a second queue splits them") }
    }

    func testTheWorkFollowsItsMostUrgentWaitingCallerDownAsWellAsUpButNeverBelowItsOwn() {
        var tracker = PriorityTracker(own: OperationPriority(queuePriority: .normal, qualityOfService: .utility))
        XCTAssertNil(tracker.next(), "the admitting thread finds nothing to write, and lets go")
        let urgent = OperationPriority(queuePriority: .veryHigh, qualityOfService: .userInitiated)
        XCTAssertTrue(tracker.demand(urgent), "a more urgent caller asks this thread to apply it")
        XCTAssertFalse(tracker.demand(OperationPriority(queuePriority: .high)), "one thread applies at a time")
        XCTAssertEqual(tracker.next(), urgent)
        XCTAssertNil(tracker.next())

        XCTAssertTrue(tracker.release(urgent), "the most urgent caller withdrew: lower the work")
        XCTAssertEqual(tracker.next(), OperationPriority(queuePriority: .high, qualityOfService: .default))
        XCTAssertNil(tracker.next())

        XCTAssertFalse(tracker.setOwn { $0.queuePriority = .low }, "a waiting .high caller keeps it high")
        XCTAssertTrue(tracker.setOwn { $0.queuePriority = .veryHigh }, "the app raises its own floor")
        XCTAssertEqual(tracker.next()?.queuePriority, .veryHigh)
    }

    func testRaisingAPriorityTakesTheMoreUrgentOfEachKnob() {
        let low = OperationPriority(queuePriority: .low, qualityOfService: .userInitiated)
        let high = OperationPriority(queuePriority: .high, qualityOfService: .background)
        XCTAssertEqual(low.raised(to: high), OperationPriority(queuePriority: .high, qualityOfService: .userInitiated))
        // `.default` has raw value -1, below `.background`; urgency orders it correctly.
        let service = OperationPriority(queuePriority: .normal, qualityOfService: .default)
        XCTAssertEqual(service.raised(to: OperationPriority(qualityOfService: .utility)).qualityOfService, .default)
    }
}
