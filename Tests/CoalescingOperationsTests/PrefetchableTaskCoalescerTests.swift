import Foundation
import XCTest

@testable import CoalescingOperations

/// Seed 001's five prefetch scenarios (A–E), and the invalidation race it had.
final class PrefetchableTaskCoalescerTests: XCTestCase {
    /// A clock the test moves by hand.
    private let clock = LockedBox(ContinuousClock.now)
    private let runs = Counter()

    private func makeCoalescer(timeout: Duration = .seconds(30)) -> PrefetchableTaskCoalescer<String, Int> {
        let clock = self.clock
        return PrefetchableTaskCoalescer(prefetchTimeout: timeout, now: { clock.value })
    }

    func testScenarioAAConsumerJoiningAPrefetchInFlightTakesItsResultAndNothingIsStored() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        let gate = AsyncGate()
        let prefetch = Task { try await coalescer.prefetch(key: "feed", operation: gated(gate, runs)) }
        await waitUntil("the prefetch started") { await coalescer.waitingCount(for: "feed") == 1 }
        let consumer = Task { try await coalescer.deduplicated(key: "feed", operation: counting(runs)) }
        await waitUntil("the consumer joined") { await coalescer.waitingCount(for: "feed") == 2 }

        gate.open()
        try await prefetch.value
        let consumed = try await consumer.value

        XCTAssertEqual(consumed, 1)
        XCTAssertEqual(runs.current, 1)
        let stored = await coalescer.storedCount
        XCTAssertEqual(stored, 0, "the joining consumer took the prefetch")
        let next = try await coalescer.deduplicated(key: "feed", operation: counting(runs))
        XCTAssertEqual(next, 2, "the next consumer starts new work")
    }

    func testScenarioBAConsumerAfterThePrefetchCompletedGetsItWithoutNewWork() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        let consumed = try await coalescer.deduplicated(key: "feed", operation: counting(runs))

        XCTAssertEqual(consumed, 1)
        XCTAssertEqual(runs.current, 1)
        let stored = await coalescer.storedCount
        XCTAssertEqual(stored, 0)
    }

    func testScenarioCOnlyTheFirstConsumerGetsThePrefetchedResult() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        let first = try await coalescer.deduplicated(key: "feed", operation: counting(runs))
        let second = try await coalescer.deduplicated(key: "feed", operation: counting(runs))
        let third = try await coalescer.deduplicated(key: "feed", operation: counting(runs))

        XCTAssertEqual([first, second, third], [1, 2, 3], "the second consumer's own result is not stored")
    }

    func testScenarioDPlainCoalescingStoresNothing() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        let gate = AsyncGate()
        let callers = (0..<2).map { _ in
            Task { try await coalescer.deduplicated(key: "feed", operation: gated(gate, runs)) }
        }
        await waitUntil("both callers joined") { await coalescer.waitingCount(for: "feed") == 2 }

        gate.open()
        let values = try await [callers[0].value, callers[1].value]
        let third = try await coalescer.deduplicated(key: "feed", operation: counting(runs))

        XCTAssertEqual(values, [1, 1])
        XCTAssertEqual(third, 2)
    }

    func testScenarioEAnExpiredPrefetchIsNotServed() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer(timeout: .seconds(30))
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        clock.value = clock.value.advanced(by: .seconds(30))
        let consumed = try await coalescer.deduplicated(key: "feed", operation: counting(runs))

        XCTAssertEqual(consumed, 2, "new work, not the expired result")
    }

    func testAPrefetchedResultIsServedUntilItsTimeout() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer(timeout: .seconds(30))
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        clock.value = clock.value.advanced(by: .seconds(29))
        let consumed = try await coalescer.deduplicated(key: "feed", operation: counting(runs))

        XCTAssertEqual(consumed, 1)
    }

    func testAnExpiredResultIsReleasedAtTheNextCallEvenForAnotherKey() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer(timeout: .seconds(10))
        try await coalescer.prefetch(key: "old", operation: counting(runs))
        clock.value = clock.value.advanced(by: .seconds(11))

        _ = try await coalescer.deduplicated(key: "other", operation: counting(runs))

        let stored = await coalescer.storedCount
        XCTAssertEqual(stored, 0)
    }

    func testPrefetchingAgainWhileAResultWaitsDoesNoWork() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        try await coalescer.prefetch(key: "feed", operation: counting(runs))
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        XCTAssertEqual(runs.current, 1)
        let consumed = try await coalescer.deduplicated(key: "feed", operation: counting(runs))
        XCTAssertEqual(consumed, 1)
    }

    func testTwoPrefetchesInFlightShareOneRunAndStoreOnce() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        let gate = AsyncGate()
        let prefetches = (0..<2).map { _ in
            Task { try await coalescer.prefetch(key: "feed", operation: gated(gate, runs)) }
        }
        await waitUntil("both prefetches joined") { await coalescer.waitingCount(for: "feed") == 2 }

        gate.open()
        for prefetch in prefetches {
            try await prefetch.value
        }

        XCTAssertEqual(runs.current, 1)
        let first = try await coalescer.deduplicated(key: "feed", operation: counting(runs))
        let second = try await coalescer.deduplicated(key: "feed", operation: counting(runs))
        XCTAssertEqual([first, second], [1, 2])
    }

    func testAPrefetchInvalidatedWhileRunningNeverStoresItsResult() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        let gate = AsyncGate()
        // Work that ignores cancellation and still produces a value.
        let prefetch = Task {
            try await coalescer.prefetch(key: "feed") {
                let run = runs.increment()
                await gate.waitIgnoringCancellation()
                return run
            }
        }
        await waitUntil("the prefetch started") { await coalescer.waitingCount(for: "feed") == 1 }

        await coalescer.invalidate(key: "feed")
        await XCTAssertThrowsCancellation(try await prefetch.value)
        gate.open()

        let consumed = try await coalescer.deduplicated(key: "feed", operation: counting(runs))
        XCTAssertEqual(consumed, 2, "the invalidated result was not stored")
    }

    func testInvalidateDropsAStoredResult() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        await coalescer.invalidate(key: "feed")

        let consumed = try await coalescer.deduplicated(key: "feed", operation: counting(runs))
        XCTAssertEqual(consumed, 2)
    }

    func testInvalidateAllDropsEveryResultAndCancelsAllWork() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        try await coalescer.prefetch(key: "a", operation: counting(runs))
        let gate = AsyncGate()
        let running = Task { try await coalescer.deduplicated(key: "b", operation: gated(gate, runs)) }
        await waitUntil("the work started") { await coalescer.waitingCount(for: "b") == 1 }

        await coalescer.invalidateAll()

        await XCTAssertThrowsCancellation(try await running.value)
        let stored = await coalescer.storedCount
        XCTAssertEqual(stored, 0)
    }

    func testAFailedPrefetchStoresNothingAndThrows() async throws {
        let runs = self.runs
        struct Failure: Error {}
        let coalescer = makeCoalescer()

        do {
            try await coalescer.prefetch(key: "feed") { throw Failure() }
            XCTFail("expected the work's error")
        } catch {
            XCTAssertTrue(error is Failure)
        }

        let consumed = try await coalescer.deduplicated(key: "feed", operation: counting(runs))
        XCTAssertEqual(consumed, 1)
    }
}

/// Work that counts its runs and returns the run number.
private func counting(_ runs: Counter) -> @Sendable () async throws -> Int {
    { runs.increment() }
}

/// Work that counts its runs and returns the run number once `gate` opens.
private func gated(_ gate: AsyncGate, _ runs: Counter) -> @Sendable () async throws -> Int {
    {
        let run = runs.increment()
        try await gate.wait()
        return run
    }
}
