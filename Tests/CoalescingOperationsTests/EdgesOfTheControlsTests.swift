import CoalescingOperations
import Foundation
import TestSupport
import XCTest

@testable import CoalescingOperations

/// Guarantees 10, 15, 17, 19, 21, 22 and 23 (see the Guarantees article) at the edges of the
/// controls, where outside probing of the second release found each idea written twice: an
/// ignored enqueue that armed a timeout, counts taken in two places, events of successive work
/// interleaving, urgency lost or written late, a timer keeping a result alive, a prefetch stored
/// twice, and the task half missing stall reports and escalation. Each test failed before the
/// controls moved into one engine, under one lock.
final class EdgesOfTheControlsTests: XCTestCase {
    private let callbacks = Queues.serial("callbacks")

    // MARK: 1. An ignored enqueue arms nothing (Guarantees 10 and 17)

    func testAnIgnoredEnqueueArmsNoTimeoutOnTheCallerItDidNotAdd() {
        let manager = OperationQueueManager()
        let recorder = ResultRecorder<Int>()
        let release = Gate()
        let work = TestOperation<Int>(
            callBackQueue: callbacks, work: heldWork(release: release) { 1 }, completionHandler: recorder.handler("own")
        )
        manager.enqueue(operation: work)

        let again = manager.enqueue(operation: work, timeout: .milliseconds(30))
        XCTAssertEqual(again.admission, .ignored)
        // A later deadline than the ignored one: once it has passed, so has the other.
        manager.enqueue(
            identifier: "work", callBackQueue: callbacks, timeout: .milliseconds(60),
            makeOperation: { TestOperation<Int>(work: { _ in }) }, completionHandler: recorder.handler("witness"))
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertTimedOut("witness")
        XCTAssertEqual(
            recorder.calls(of: "own").count, 0, "the ignored enqueue's timeout fired on the operation's caller")

        release.open()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("own", 1)
    }

    // MARK: 2. Every caller counted once arriving and once leaving (Guarantee 21)

    func testAnOperationsOwnHandlerAndTheCallersHandlerAreTwoCallersOneStartingOneJoining() {
        let manager = OperationQueueManager()
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            identifier: "work", callBackQueue: callbacks,
            makeOperation: {
                TestOperation<Int>(
                    callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                    completionHandler: recorder.handler("operation's own"))
            }, completionHandler: recorder.handler("caller"))
        XCTAssertTrue(recorder.waitForCalls(2))
        manager.queue.waitUntilAllOperationsAreFinished()

        let statistics = manager.statistics
        XCTAssertEqual(statistics.workStarted, 1)
        XCTAssertEqual(statistics.callersArrived, 2)
        XCTAssertEqual(statistics.callersJoined, 1)
        XCTAssertEqual(statistics.callersServed, 2)
    }

    func testTwoTasksAwaitingTheSameOperationAreTwoCallersAndTheSecondJoins() async throws {
        let log = EventLog()
        let manager = OperationQueueManager(observer: log.observer)
        let release = Gate()
        let started = Gate()
        let work = TestOperation<Int>(work: heldWork(release: release, started: started) { 7 })
        let first = Task { try await manager.value(of: work) }
        XCTAssertTrue(started.wait())
        let second = Task { try await manager.value(of: work) }
        await waitUntil("both tasks wait") { manager.callerCount(identifier: "work", valueType: Int.self) == 2 }
        release.open()

        let values = try await [first.value, second.value]
        XCTAssertEqual(values, [7, 7])
        let statistics = manager.statistics
        XCTAssertEqual(statistics.callersArrived, 2)
        XCTAssertEqual(statistics.callersJoined, 1)
        XCTAssertEqual(statistics.callersServed, 2)
        await waitUntil("the end is delivered") { log.kinds.last == "ended" }
        // The tasks' own priority moves the work too (Guarantee 19), which this test does not look at.
        XCTAssertEqual(log.kinds.filter { $0 != "priority" }, ["started", "joined", "ended"])
    }

    func testCallersWhoAllLeaveNeverMakeTheSavedCountNegative() async {
        let single = InFlightTaskCoalescer<String, Int>()
        let alone = Task {
            try await single.value(key: "k") {
                try await AsyncGate().wait()
                return 1
            }
        }
        await waitUntil("the caller waits") { single.callerCount(for: "k") == 1 }
        alone.cancel()
        await XCTAssertThrowsCancellation(try await alone.value)
        await waitUntil("the work ended") { single.statistics.workInFlight == 0 }
        XCTAssertEqual(single.statistics.callersJoined, 0)

        let crowd = InFlightTaskCoalescer<String, Int>()
        let held = AsyncGate()
        let callers = (0..<50).map { _ in
            Task {
                try await crowd.value(key: "k", timeout: .milliseconds(20)) {
                    try await held.wait()
                    return 1
                }
            }
        }
        for caller in callers {
            do {
                _ = try await caller.value
                XCTFail("the work is held: every caller times out")
            } catch {
                XCTAssertEqual(error as? CoalescingError, .timedOut)
            }
        }
        await waitUntil("the abandoned work ended") { crowd.statistics.workInFlight == 0 }
        let statistics = crowd.statistics
        XCTAssertEqual(statistics.callersTimedOut, 50)
        XCTAssertEqual(statistics.callersArrived, 50)
        XCTAssertGreaterThanOrEqual(statistics.callersJoined, 0)
    }

    // MARK: 3. Events of successive work never interleave (Guarantee 22)

    func testEventsOfSuccessiveOperationWorkOnOneKeyNeverInterleave() {
        for _ in 0..<100 {
            let log = EventLog()
            let manager = OperationQueueManager(observer: log.observer)
            let served = DispatchGroup()
            for _ in 0..<20 {
                served.enter()
            }
            DispatchQueue.global().async {
                for _ in 0..<20 {
                    manager.enqueue(
                        identifier: "k", callBackQueue: nil,
                        makeOperation: { TestOperation<Int>(work: { $0.finish(result: .success(1)) }) },
                        completionHandler: { _ in served.leave() })
                }
            }
            XCTAssertEqual(served.wait(timeout: .now() + 10), .success)
            XCTAssertEqual(log.interleavings, [], "\(log.kinds)")
        }
    }

    func testEventsOfSuccessiveTaskWorkOnOneKeyNeverInterleave() async throws {
        for _ in 0..<100 {
            let log = EventLog()
            let coalescer = InFlightTaskCoalescer<String, Int>(observer: log.observer)
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<20 {
                    group.addTask { try await coalescer.value(key: "k") { 1 } }
                }
                for try await value in group {
                    XCTAssertEqual(value, 1)
                }
            }
            await waitUntil("every event is delivered") {
                log.kinds.filter { $0 == "ended" }.count == coalescer.statistics.workEnded
            }
            XCTAssertEqual(log.interleavings, [], "\(log.kinds)")
        }
    }

    // MARK: 4-5. Priority follows every caller, and stops when the work starts (Guarantee 19)

    func testTheUrgencyOfACallerWhoseOperationLostTheRaceToStartStillRaisesTheWork() {
        let queue = Queues.concurrent("work", suspended: true)
        let manager = OperationQueueManager(queue: queue)
        let urgentIsMaking = Gate()
        let normalStarted = Gate()
        let urgentReturned = Gate()
        let recorder = ResultRecorder<Int>()
        let built = LockedBox<[TestOperation<Int>]>([])
        @Sendable func make() -> TestOperation<Int> {
            let operation = TestOperation<Int>(work: { $0.finish(result: .success(1)) })
            built.mutate { $0.append(operation) }
            return operation
        }
        let callbacks = callbacks
        DispatchQueue.global().async {
            manager.enqueue(
                identifier: "work", callBackQueue: callbacks, priority: OperationPriority(queuePriority: .veryHigh),
                makeOperation: {
                    urgentIsMaking.open()
                    _ = normalStarted.wait()
                    return make()
                }, completionHandler: recorder.handler("urgent"))
            urgentReturned.open()
        }
        XCTAssertTrue(urgentIsMaking.wait())
        let normal = manager.enqueue(
            identifier: "work", callBackQueue: callbacks, makeOperation: make,
            completionHandler: recorder.handler("normal"))
        XCTAssertEqual(normal.admission, .startedWork)
        normalStarted.open()
        // The priority is written after the engine's lock is released, before the joining call
        // returns: counting the caller under the lock was too early to look (seen once under TSan).
        XCTAssertTrue(urgentReturned.wait())
        XCTAssertEqual(manager.callerCount(identifier: "work", valueType: Int.self), 2, "the urgent caller joined")
        XCTAssertEqual(built.value.first?.queuePriority, .veryHigh, "the waiting work follows its most urgent caller")
        queue.isSuspended = false
        XCTAssertTrue(recorder.waitForCalls(2))
    }

    func testNoPriorityIsWrittenOnceTheWorkHasStarted() {
        for _ in 0..<500 {
            let queue = Queues.concurrent("work", suspended: true)
            let manager = OperationQueueManager(queue: queue)
            let started = LockedBox<Operation.QueuePriority?>(nil)
            let flipping = DispatchGroup()
            let done = Gate()
            let work = TestOperation<Int>(
                work: { operation in
                    started.mutate { $0 = operation.queuePriority }
                    DispatchQueue.global().async {
                        flipping.wait()
                        operation.finish(result: .success(1))
                    }
                })
            let handles = (0..<2).map { _ in
                manager.enqueue(
                    identifier: "work", callBackQueue: nil, makeOperation: { work },
                    completionHandler: { _ in done.open() })
            }
            for (index, handle) in handles.enumerated() {
                // Threads of their own: spinning on the dispatch pool would starve the queue's start.
                flipping.enter()
                Thread.detachNewThread {
                    var rounds = 0
                    let deadline = Date() + 10
                    // Flip until well after the work started, each caller the other way round.
                    while (started.value == nil || rounds < 100) && Date() < deadline {
                        let urgent = (rounds + index) % 2 == 0
                        handle.setPriority(OperationPriority(queuePriority: urgent ? .veryHigh : .veryLow))
                        if started.value != nil { rounds += 1 }
                    }
                    flipping.leave()
                }
            }
            queue.isSuspended = false
            XCTAssertTrue(done.wait() && done.wait())
            XCTAssertEqual(work.queuePriority, started.value, "the priority moved after main() began")
        }
    }

    // MARK: 6. A timer holds its work weakly (Guarantee 17)

    func testAnUnfiredTimeoutDoesNotKeepTheResultAlive() async throws {
        let inFlight = InFlightTaskCoalescer<String, Payload>()
        let prefetchable = PrefetchableTaskCoalescer<String, Payload>(prefetchTimeout: .seconds(1))
        weak var first: Payload?
        weak var second: Payload?
        do {
            let value = try await inFlight.value(key: "k", timeout: .seconds(120)) { Payload() }
            first = value
            let other = try await prefetchable.value(key: "k", timeout: .seconds(120)) { Payload() }
            second = other
        }
        await waitUntil("the results are released") { first == nil && second == nil }
    }

    // MARK: 7. A prefetch stores for one consumer (Guarantee 15)

    func testAPrefetchAConsumerStillWaitsForStoresNothingWhenAnotherConsumerLeaves() async throws {
        let coalescer = PrefetchableTaskCoalescer<String, Int>(prefetchTimeout: .seconds(30))
        let runs = Counter()
        let release = AsyncGate()
        let prefetch = Task {
            try await coalescer.prefetch(key: "k") {
                try await release.wait()
                return runs.increment()
            }
        }
        await waitUntil("the prefetch runs") { coalescer.callerCount(for: "k") == 1 }
        let leaving = Task { try await coalescer.value(key: "k") { runs.increment() } }
        let staying = Task { try await coalescer.value(key: "k") { runs.increment() } }
        await waitUntil("both consumers wait") { coalescer.callerCount(for: "k") == 3 }
        leaving.cancel()
        await XCTAssertThrowsCancellation(try await leaving.value)
        release.open()

        let taken = try await staying.value
        try await prefetch.value
        XCTAssertEqual(taken, 1)
        let third = try await coalescer.value(key: "k") { runs.increment() }
        XCTAssertEqual(third, 2, "the consumer that stayed took the value: nothing was stored")
    }

    // MARK: 8. The task half reports stalls and forwards escalation (Guarantees 19 and 23)

    func testTaskWorkThatStallsIsReportedOnce() async throws {
        let log = EventLog()
        let coalescer = InFlightTaskCoalescer<String, Int>(
            observer: log.observer, stallThreshold: .milliseconds(20))
        let release = AsyncGate()
        let caller = Task {
            try await coalescer.value(key: "k") {
                try await release.wait()
                return 1
            }
        }
        await waitUntil("the stall is reported") { log.kinds.contains("stalled") }
        release.open()
        _ = try await caller.value
        await waitUntil("the end is reported") { log.kinds.last == "ended" }
        XCTAssertEqual(log.kinds, ["started", "stalled", "ended"])
    }

    #if compiler(>=6.2)
    func testACallerEscalatedWhileItWaitsEscalatesTheWork() async throws {
        let coalescer = InFlightTaskCoalescer<String, TaskPriority>()
        let seen = LockedBox<TaskPriority?>(nil)
        let release = AsyncGate()
        let watching = AsyncGate()
        let waiting = Task(priority: .low) {
            try await coalescer.value(key: "k") {
                try await withTaskPriorityEscalationHandler {
                    watching.open()
                    try await release.wait()
                } onPriorityEscalated: { _, raised in
                    seen.mutate { $0 = raised }
                }
                return Task.currentPriority
            }
        }
        // The work's handler hears only escalations after it is installed: a work task escalated
        // before it ran that far runs higher, but its handler never says so (seen once under TSan).
        try await watching.wait()
        await waitUntil("the caller waits") { coalescer.callerCount(for: "k") == 1 }
        waiting.escalatePriority(to: .high)
        await waitUntil("the work is escalated with its caller") { (seen.value ?? .low) >= .high }
        release.open()
        let priority = try await waiting.value
        XCTAssertGreaterThanOrEqual(priority, .high, "the work ran at the priority its waiting caller was raised to")
    }
    #endif
}

/// A value whose release a test can watch.
private final class Payload: Sendable {}
