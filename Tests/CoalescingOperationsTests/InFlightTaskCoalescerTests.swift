import Foundation
import TestSupport
import XCTest

@testable import CoalescingOperations

/// The task coalescer: Guarantees 12, 13 and 14 (see the Guarantees article).
final class InFlightTaskCoalescerTests: XCTestCase {
    struct WorkFailed: Error, Equatable {}

    /// Starts `count` callers of `key` and waits until all of them have joined.
    private func joinedCallers(
        _ count: Int, key: String = "key", on coalescer: InFlightTaskCoalescer<String, Int>,
        work: @escaping @Sendable () async throws -> Int
    ) async -> [Task<Int, Error>] {
        let callers = (0..<count).map { _ in
            Task { try await coalescer.value(key: key, operation: work) }
        }
        await waitUntil("\(count) callers joined") { coalescer.callerCount(for: key) == count }
        return callers
    }

    func testConcurrentCallersShareOneRunOfTheWork() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let runs = Counter()
        let gate = AsyncGate()
        let callers = await joinedCallers(3, on: coalescer) {
            runs.increment()
            try await gate.wait()
            return 42
        }

        gate.open()

        for caller in callers {
            let value = try await caller.value
            XCTAssertEqual(value, 42)
        }
        XCTAssertEqual(runs.current, 1)
    }

    func testACallAfterTheWorkEndedStartsNewWork() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let runs = Counter()

        let first = try await coalescer.value(key: "key") { runs.increment() }
        let second = try await coalescer.value(key: "key") { runs.increment() }

        XCTAssertEqual([first, second], [1, 2])
    }

    func testDifferentKeysRunSeparately() async throws {
        let coalescer = InFlightTaskCoalescer<String, String>()
        async let a = coalescer.value(key: "a") { "a" }
        async let b = coalescer.value(key: "b") { "b" }
        let values = try await [a, b]
        XCTAssertEqual(values, ["a", "b"])
    }

    func testNewWorkAfterCancelIsNeverUnregisteredByTheOldWorkEnding() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let oldGate = AsyncGate()
        let newGate = AsyncGate()
        let oldWorkEnded = AsyncGate()
        let runs = Counter()
        let old = Task {
            try await coalescer.value(key: "key") {
                runs.increment()
                await oldGate.waitIgnoringCancellation()  // work that ignores cancellation
                oldWorkEnded.open()
                return 1
            }
        }
        await waitUntil("the old work has its caller") { coalescer.callerCount(for: "key") == 1 }

        let cancelled = coalescer.cancel(key: "key")
        XCTAssertTrue(cancelled)
        await XCTAssertThrowsCoalescingError(.cancelled, try await old.value)
        let new = await joinedCallers(1, on: coalescer) {
            runs.increment()
            try await newGate.wait()
            return 2
        }
        oldGate.open()
        try await oldWorkEnded.wait()
        // The old work's end must not have removed the new work: a third caller joins it.
        let third = Task { try await coalescer.value(key: "key") { runs.increment() } }
        await waitUntil("the third caller joined") { coalescer.callerCount(for: "key") == 2 }

        newGate.open()
        let values = try await [new[0].value, third.value]
        XCTAssertEqual(values, [2, 2])
        XCTAssertEqual(runs.current, 2)
    }

    func testACancelledCallerWithdrawsAtOnceWhileTheOthersAreServed() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let gate = AsyncGate()
        let callers = await joinedCallers(3, on: coalescer) {
            try await gate.wait()
            return 7
        }

        callers[1].cancel()
        await XCTAssertThrowsCancellation(try await callers[1].value)  // while the work is still held
        await waitUntil("the cancelled caller withdrew") { coalescer.callerCount(for: "key") == 2 }

        gate.open()
        let values = try await [callers[0].value, callers[2].value]
        XCTAssertEqual(values, [7, 7])
    }

    func testTheWorkIsCancelledWhenTheLastCallerWithdraws() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let gate = AsyncGate()
        let workSawCancellation = AsyncGate()
        let callers = await joinedCallers(2, on: coalescer) {
            do {
                try await gate.wait()
            } catch {
                workSawCancellation.open()
                throw error
            }
            return 1
        }

        callers.forEach { $0.cancel() }
        for caller in callers {
            await XCTAssertThrowsCancellation(try await caller.value)
        }

        try await workSawCancellation.wait()
        let next = try await coalescer.value(key: "key") { 2 }
        XCTAssertEqual(next, 2, "a new caller starts new work")
    }

    func testACallerWhoseTaskIsAlreadyCancelledStartsNoWork() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let runs = Counter()
        let caller = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await coalescer.value(key: "key") { runs.increment() }
        }

        await XCTAssertThrowsCancellation(try await caller.value)
        XCTAssertEqual(runs.current, 0)
    }

    func testWorkThatThrowsDeliversTheErrorToEveryCallerAndFreesTheKey() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let gate = AsyncGate()
        let callers = await joinedCallers(3, on: coalescer) {
            try await gate.wait()
            throw WorkFailed()
        }

        gate.open()
        for caller in callers {
            do {
                _ = try await caller.value
                XCTFail("expected the work's error")
            } catch {
                XCTAssertEqual(error as? WorkFailed, WorkFailed())
            }
        }
        let retry = try await coalescer.value(key: "key") { 5 }
        XCTAssertEqual(retry, 5)
    }

    func testTenThousandConcurrentCallersShareOneRun() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let runs = Counter()
        let gate = AsyncGate()
        let callers = await joinedCallers(10_000, on: coalescer) {
            runs.increment()
            try await gate.wait()
            return 3
        }

        gate.open()
        var sum = 0
        for caller in callers {
            sum += try await caller.value
        }
        XCTAssertEqual(sum, 30_000)
        XCTAssertEqual(runs.current, 1)
    }

    func testCancelAllCancelsTheCallersOfEveryKey() async throws {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let gate = AsyncGate()
        var callers: [Task<Int, Error>] = []
        for key in ["a", "b", "c"] {
            callers += await joinedCallers(2, key: key, on: coalescer) {
                await gate.waitIgnoringCancellation()
                return 1
            }
        }

        coalescer.cancelAll()

        for caller in callers {
            await XCTAssertThrowsCoalescingError(.cancelled, try await caller.value)
        }
        gate.open()
        let fresh = try await coalescer.value(key: "a") { 9 }
        XCTAssertEqual(fresh, 9)
    }

    func testCancelKeyReportsWhetherWorkWasInFlight() async {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let result = coalescer.cancel(key: "nothing")
        XCTAssertFalse(result)
    }

    func testAMoreUrgentCallerRaisesThePriorityOfTheWork() async throws {
        let coalescer = InFlightTaskCoalescer<String, TaskPriority>()
        let gate = AsyncGate()
        let low = Task(priority: .low) {
            try await coalescer.value(key: "key") {
                try await gate.wait()
                // The joining call raises the work after the engine's lock is released, so being
                // counted comes first, and the test opens the gate on the count: the work gives the
                // raise a moment to land.
                let deadline = ContinuousClock.now + .seconds(10)
                while Task.currentPriority < .high, ContinuousClock.now < deadline {
                    await Task.yield()
                }
                return Task.currentPriority
            }
        }
        await waitUntil("the first caller joined") { coalescer.callerCount(for: "key") == 1 }
        let high = Task(priority: .high) {
            try await coalescer.value(key: "key") { .low }
        }
        await waitUntil("the urgent caller joined") { coalescer.callerCount(for: "key") == 2 }

        gate.open()
        let priorities = try await [low.value, high.value]
        XCTAssertEqual(priorities[0], priorities[1])
        XCTAssertGreaterThanOrEqual(priorities[0], .high)
    }
}
