import Foundation
import Testing

@testable import CoalescingOperations

/// Guarantees 2, 5 and 6 (see the Guarantees article) in the state machine behind every operation,
/// on its own: no queue, no threads.
@Suite("OperationState")
struct OperationStateTests {
    private typealias State = OperationState<Int>

    private static func handler(_ queue: OperationQueue? = nil) -> Subscriber<Int> {
        .handler({ _ in }, queue: queue)
    }

    @Test("A queued operation starts, and finishes once its result is handed out")
    func startThenResolve() {
        var state = State(caller: Self.handler())
        let claimed = state.claim(registration: nil, priority: nil)
        #expect(claimed)
        let start = state.begin()
        #expect(start == .run)
        #expect(state.phase == .executing)

        let resolution = state.resolve()
        #expect(resolution?.callers.count == 1)
        let second = state.resolve()
        #expect(second == nil, "only the first resolution wins")
        let keys = state.settle()
        #expect(keys == LifecycleKey.executingAndFinished)
        state.markFinished()
        #expect(state.phase == .finished)
        let restart = state.begin()
        #expect(restart == .ignore, "starting again changes nothing")
    }

    @Test("A result decided before the start finishes the operation only when the queue starts it")
    func resolveBeforeStart() {
        var state = State(caller: Self.handler())
        let claimed = state.claim(registration: nil, priority: nil)
        #expect(claimed)
        let resolution = state.resolve()
        #expect(resolution != nil)
        let keys = state.settle()
        #expect(keys == nil, "not started: the queue's start() finishes it")
        #expect(state.phase == .enqueued)

        let start = state.begin()
        #expect(start == .finishWithoutRunning)
        #expect(state.phase == .finished)
    }

    @Test("A start that comes while the result is being handed out leaves the finish to settling")
    func startDuringSettling() {
        var state = State(caller: Self.handler())
        let resolution = state.resolve()
        #expect(resolution != nil)
        let start = state.begin()
        #expect(start == .ignore, "main() must not run for a decided result")
        #expect(state.phase == .executing)
        let keys = state.settle()
        #expect(keys == LifecycleKey.executingAndFinished)
    }

    @Test("Withdrawing removes one caller once, and abandons the work with the last one")
    func withdrawal() {
        var state = State(caller: Self.handler())
        let second = state.subscribe(Self.handler())
        #expect(second == 1)

        let first = state.withdraw(slot: 0)
        #expect(first.removed != nil)
        #expect(!first.abandoned)
        let again = state.withdraw(slot: 0)
        #expect(again.removed == nil, "already withdrawn")

        let last = state.withdraw(slot: 1)
        #expect(last.removed != nil)
        #expect(last.abandoned)
    }

    @Test("Nothing can join or withdraw once the result is decided")
    func decidedWorkIsClosed() {
        var state = State(caller: Self.handler())
        _ = state.resolve()
        let slot = state.subscribe(Self.handler())
        #expect(slot == nil)
        let withdrawal = state.withdraw(slot: 0)
        #expect(withdrawal.removed == nil)
        #expect(!state.canAbsorb)
        #expect(!state.isFresh)
    }

    @Test("Callers on one queue are handed the result as one list; a second queue splits them")
    func callerQueues() {
        let shared = OperationQueue()
        var state = State(caller: Self.handler(shared))
        _ = state.subscribe(Self.handler(shared))
        guard case .one(let queue) = state.callerQueues else {
            Issue.record("expected one shared queue, got \(state.callerQueues)")
            return
        }
        #expect(queue === shared)

        _ = state.subscribe(Self.handler(OperationQueue()))
        guard case .several = state.callerQueues else {
            Issue.record("expected several queues, got \(state.callerQueues)")
            return
        }
    }

    @Test("A raised priority is applied by one thread at a time, and never lowered")
    func priorityRequests() {
        let base = OperationPriority(of: Operation())
        var state = State(caller: nil)
        let claimed = state.claim(registration: nil, priority: base)
        #expect(claimed)
        let pending = state.nextPriorityToApply()
        #expect(pending == nil, "the admitting thread finds nothing raised")

        var urgent = base
        urgent.queuePriority = .veryHigh
        let mustApply = state.request(urgent)
        #expect(mustApply, "no thread is applying: this caller must")
        var lower = base
        lower.queuePriority = .high
        let mustApplyLower = state.request(lower)
        #expect(!mustApplyLower, "lower than what is requested: nothing to do")

        let applied = state.nextPriorityToApply()
        #expect(applied?.queuePriority == .veryHigh)
        let done = state.nextPriorityToApply()
        #expect(done == nil)
    }

    @Test("Raising a priority takes the more urgent of each knob")
    func raisedPriority() {
        var low = OperationPriority(of: Operation())
        low.queuePriority = .low
        low.qualityOfService = .userInitiated
        var high = low
        high.queuePriority = .high
        high.qualityOfService = .background

        let raised = low.raised(to: high)
        #expect(raised.queuePriority == .high)
        #expect(raised.qualityOfService == .userInitiated)
    }
}
