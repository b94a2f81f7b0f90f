import Foundation
import XCTest

@testable import CoalescingOperations

/// Guarantees 5, 7, 15, 16, 18, 19, 21 and 22 (see the Guarantees article) in the engine's
/// transitions, on their own: no queue, no threads, each change to the registry and to one work,
/// what it counts and records, and the effects it leaves to be carried out.
final class EngineTests: XCTestCase {
    private typealias TestEngine = Engine<String>

    private let engine = TestEngine(observer: { _ in }, stallThreshold: nil, prefetchTimeout: .seconds(30))

    private func work(_ key: String = "k", policy: AbandonedWorkPolicy = .cancel) -> Work<String, Int> {
        Work(key: key, runner: .task(nil), policy: policy, floor: Urgency(TaskPriority.medium), timed: false)
    }

    private func events(_ registry: inout TestEngine.Registry) -> [String] {
        registry.takeEvents().map { event in
            switch event {
            case .workStarted: "started"
            case .callerJoined(_, _, let callers): "joined \(callers)"
            case .callerWithdrawn(_, _, let reason): "withdrawn \(reason)"
            case .priorityChanged: "priority"
            case .workEnded(_, _, let outcome, _, let served, _): "ended \(outcome) serving \(served)"
            case .workStalled: "stalled"
            }
        }
    }

    private static var handler: Caller<Int> { .handler({ _ in }, queue: nil) }

    /// Whether a transition left nothing to carry out.
    private func isEmpty(_ effects: TestEngine.Effects<Int>) -> Bool {
        effects.stop == nil && effects.withdrawn == nil && effects.served == nil && effects.ended == nil
            && effects.reprioritize == nil && effects.delivering.isEmpty
    }

    /// Adds `caller` to `work` and returns its slot.
    private func join(_ registry: inout TestEngine.Registry, _ work: Work<String, Int>, _ caller: Caller<Int>) -> Int {
        registry.join(work, caller, asking: nil).slot
    }

    func testTheFirstCallerStartsTheWorkAndEveryLaterOneJoinsIt() {
        engine.state.withLock { registry in
            let work = work()
            registry.start(work)
            XCTAssertEqual(join(&registry, work, Self.handler), 0)
            XCTAssertEqual(join(&registry, work, Self.handler), 1)
            XCTAssertTrue(registry.inFlight("k", as: Int.self) === work)
            XCTAssertEqual(registry.statistics.workStarted, 1)
            XCTAssertEqual(registry.statistics.callersArrived, 2)
            XCTAssertEqual(registry.statistics.callersJoined, 1)
            XCTAssertEqual(events(&registry), ["started", "joined 2"])
        }
    }

    func testAJoinedOperationWithoutAHandlerIsNoCaller() {
        engine.state.withLock { registry in
            let work = work()
            registry.start(work)
            let rider = CoalescibleOperation<Int>(identifier: "k")
            _ = join(&registry, work, .operation(rider, waits: false))
            XCTAssertEqual(work.live, 0)
            XCTAssertEqual(registry.statistics.callersArrived, 0)
        }
    }

    func testWithdrawingOneOfTwoCallersLeavesTheWorkInFlight() {
        engine.state.withLock { registry in
            let work = work()
            registry.start(work)
            _ = join(&registry, work, Self.handler)
            _ = join(&registry, work, Self.handler)
            _ = events(&registry)

            let effects = registry.withdraw(work, slot: 1, reason: .timedOut)
            XCTAssertNotNil(effects.withdrawn)
            XCTAssertNil(effects.stop)
            XCTAssertNil(effects.served)
            XCTAssertTrue(work.isInFlight)
            XCTAssertTrue(isEmpty(registry.withdraw(work, slot: 1, reason: .withdrawn)), "a caller leaves once")
            XCTAssertEqual(registry.statistics.callersTimedOut, 1)
            XCTAssertEqual(events(&registry), ["withdrawn timedOut"])
        }
    }

    func testTheLastCallerLeavingCancelsTheWorkAndStopsItBeforeAnyoneHears() {
        engine.state.withLock { registry in
            let work = work()
            registry.start(work)
            _ = join(&registry, work, Self.handler)
            _ = events(&registry)

            let effects = registry.withdraw(work, slot: 0, reason: .withdrawn)
            XCTAssertNotNil(effects.stop, "abandoned work is stopped")
            XCTAssertNotNil(effects.withdrawn)
            XCTAssertFalse(work.isInFlight)
            XCTAssertNil(registry.inFlight("k", as: Int.self))
            XCTAssertEqual(registry.statistics.workCancelled, 1)
            XCTAssertEqual(registry.statistics.callersServed, 0)
            XCTAssertEqual(events(&registry), ["withdrawn withdrawn", "ended cancelled serving 0"])
        }
    }

    func testWorkThatRunsToCompletionOutlivesItsLastCaller() {
        engine.state.withLock { registry in
            let work = work(policy: .runToCompletion)
            registry.start(work)
            _ = join(&registry, work, Self.handler)

            let effects = registry.withdraw(work, slot: 0, reason: .withdrawn)
            XCTAssertNil(effects.stop)
            XCTAssertTrue(work.isInFlight)
            XCTAssertTrue(registry.inFlight("k", as: Int.self) === work, "callers arriving meanwhile join it")
        }
    }

    func testOnlyTheFirstEndDecidesTheResult() {
        engine.state.withLock { registry in
            let work = work()
            registry.start(work)
            _ = join(&registry, work, Self.handler)

            let first = registry.end(work, with: .success(1), stopping: false)
            XCTAssertEqual(first.served?.0.entries.count, 1)
            XCTAssertNil(first.stop)
            XCTAssertTrue(isEmpty(registry.end(work, with: .success(2), stopping: true)))
            XCTAssertTrue(isEmpty(registry.withdraw(work, slot: 0, reason: .withdrawn)), "the result is on its way")
            XCTAssertEqual(registry.statistics.workSucceeded, 1)
            XCTAssertEqual(registry.statistics.callersServed, 1)
        }
    }

    func testForgottenWorkEndingLaterLeavesTheNewWorksEntryAlone() {
        engine.state.withLock { registry in
            let old = work()
            registry.start(old)
            XCTAssertTrue(registry.forget("k"))
            XCTAssertNil(registry.inFlight("k", as: Int.self))
            let new = work()
            registry.start(new)

            _ = registry.end(old, with: .success(1), stopping: false)
            XCTAssertTrue(registry.inFlight("k", as: Int.self) === new)
        }
    }

    func testAPrefetchStoresItsValueOnlyWhenNoConsumerWaitsForIt() {
        engine.state.withLock { registry in
            let waitedFor = work("a")
            waitedFor.isPrefetch = true
            registry.start(waitedFor)
            _ = join(&registry, waitedFor, .task(nil, consumes: true))
            _ = registry.end(waitedFor, with: .success(1), stopping: false)
            XCTAssertNil(registry.takeStored("a", as: Int.self))

            let unclaimed = work("b")
            unclaimed.isPrefetch = true
            registry.start(unclaimed)
            _ = join(&registry, unclaimed, .task(nil, consumes: false))
            _ = join(&registry, unclaimed, .task(nil, consumes: true))
            _ = registry.withdraw(unclaimed, slot: 1, reason: .withdrawn)
            XCTAssertTrue(unclaimed.isInFlight, "the prefetcher still waits")
            _ = registry.end(unclaimed, with: .success(2), stopping: false)
            XCTAssertEqual(registry.takeStored("b", as: Int.self), 2)
            XCTAssertNil(registry.takeStored("b", as: Int.self), "stored for one consumer")
        }
    }

    func testTheWorksPriorityIsItsMostUrgentWaitingCallersRecomputedWhenOneLeaves() {
        engine.state.withLock { registry in
            let work = Work<String, Int>(
                key: "k", runner: .operation(CoalescibleOperation<Int>(identifier: "k")), policy: .runToCompletion,
                floor: Urgency(OperationPriority()), timed: false)
            registry.start(work)
            let urgent = OperationPriority(queuePriority: .veryHigh)
            let high = OperationPriority(queuePriority: .high, qualityOfService: .userInitiated)
            _ = registry.join(work, Self.handler, asking: Urgency(high))
            _ = registry.join(work, Self.handler, asking: Urgency(urgent))
            XCTAssertEqual(
                work.target, Urgency(OperationPriority(queuePriority: .veryHigh, qualityOfService: .userInitiated)))

            _ = registry.withdraw(work, slot: 1, reason: .withdrawn)
            XCTAssertEqual(work.target, Urgency(high), "the urgency left with its caller")
            _ = registry.withdraw(work, slot: 0, reason: .withdrawn)
            XCTAssertEqual(work.target, Urgency(OperationPriority()), "never below the operation's own")
        }
    }
}
