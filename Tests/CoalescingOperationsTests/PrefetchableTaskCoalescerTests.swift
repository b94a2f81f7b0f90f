import Foundation
import TestSupport
import XCTest

@testable import CoalescingOperations

/// Guarantee 15 (see the Guarantees article): the five prefetch cases users know from the blog
/// pattern (A–E below), the cancellation race, and the three bugs of issue 9.
final class PrefetchableTaskCoalescerTests: XCTestCase {
    /// A clock the test moves by hand.
    private let clock = ManualClock()
    private let runs = Counter()

    private func makeCoalescer(timeout: Duration = .seconds(30)) -> PrefetchableTaskCoalescer<String, Int> {
        PrefetchableTaskCoalescer(prefetchTimeout: timeout, stallThreshold: nil, clock: clock)
    }

    /// Starts a prefetch of "feed" held at `gate`, and a consumer that has joined it.
    private func prefetchWithAJoinedConsumer(
        _ coalescer: PrefetchableTaskCoalescer<String, Int>, gate: AsyncGate
    ) async -> (prefetch: Task<Void, Error>, consumer: Task<Int, Error>) {
        let runs = self.runs
        let prefetch = Task { try await coalescer.prefetch(key: "feed", operation: gated(gate, runs)) }
        await waitUntil("the prefetch started") { coalescer.callerCount(for: "feed") == 1 }
        let consumer = Task { try await coalescer.value(key: "feed", operation: counting(runs)) }
        await waitUntil("the consumer joined") { coalescer.callerCount(for: "feed") == 2 }
        return (prefetch, consumer)
    }

    func testCaseAAConsumerJoiningAPrefetchInFlightTakesItsResultAndNothingIsStored() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        let gate = AsyncGate()
        let (prefetch, consumer) = await prefetchWithAJoinedConsumer(coalescer, gate: gate)

        gate.open()
        try await prefetch.value
        let consumed = try await consumer.value

        XCTAssertEqual(consumed, 1)
        XCTAssertEqual(runs.current, 1)
        let stored = coalescer.storedCount
        XCTAssertEqual(stored, 0, "the joining consumer took the prefetch")
        let next = try await coalescer.value(key: "feed", operation: counting(runs))
        XCTAssertEqual(next, 2, "the next consumer starts new work")
    }

    func testCaseBAConsumerAfterThePrefetchCompletedGetsItWithoutNewWork() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        let consumed = try await coalescer.value(key: "feed", operation: counting(runs))

        XCTAssertEqual(consumed, 1)
        XCTAssertEqual(runs.current, 1)
        let stored = coalescer.storedCount
        XCTAssertEqual(stored, 0)
    }

    func testCaseCOnlyTheFirstConsumerGetsThePrefetchedResult() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        let first = try await coalescer.value(key: "feed", operation: counting(runs))
        let second = try await coalescer.value(key: "feed", operation: counting(runs))
        let third = try await coalescer.value(key: "feed", operation: counting(runs))

        XCTAssertEqual([first, second, third], [1, 2, 3], "the second consumer's own result is not stored")
    }

    func testCaseDPlainCoalescingStoresNothing() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        let gate = AsyncGate()
        let callers = (0..<2).map { _ in
            Task { try await coalescer.value(key: "feed", operation: gated(gate, runs)) }
        }
        await waitUntil("both callers joined") { coalescer.callerCount(for: "feed") == 2 }

        gate.open()
        let values = try await [callers[0].value, callers[1].value]
        let third = try await coalescer.value(key: "feed", operation: counting(runs))

        XCTAssertEqual(values, [1, 1])
        XCTAssertEqual(third, 2)
    }

    func testCaseEAnExpiredPrefetchIsNotServed() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer(timeout: .seconds(30))
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        clock.advance(by: .seconds(30))
        let consumed = try await coalescer.value(key: "feed", operation: counting(runs))

        XCTAssertEqual(consumed, 2, "new work, not the expired result")
    }

    func testAPrefetchedResultIsServedUntilItsTimeout() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer(timeout: .seconds(30))
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        clock.advance(by: .seconds(29))
        let consumed = try await coalescer.value(key: "feed", operation: counting(runs))

        XCTAssertEqual(consumed, 1)
    }

    func testAnExpiredResultIsReleasedAtTheNextCallEvenForAnotherKey() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer(timeout: .seconds(10))
        try await coalescer.prefetch(key: "old", operation: counting(runs))
        clock.advance(by: .seconds(11))

        _ = try await coalescer.value(key: "other", operation: counting(runs))

        let stored = coalescer.storedCount
        XCTAssertEqual(stored, 0)
    }

    func testPrefetchingAgainWhileAResultWaitsDoesNoWork() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        try await coalescer.prefetch(key: "feed", operation: counting(runs))
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        XCTAssertEqual(runs.current, 1)
        let consumed = try await coalescer.value(key: "feed", operation: counting(runs))
        XCTAssertEqual(consumed, 1)
    }

    func testTwoPrefetchesInFlightShareOneRunAndStoreOnce() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        let gate = AsyncGate()
        let prefetches = (0..<2).map { _ in
            Task { try await coalescer.prefetch(key: "feed", operation: gated(gate, runs)) }
        }
        await waitUntil("both prefetches joined") { coalescer.callerCount(for: "feed") == 2 }

        gate.open()
        for prefetch in prefetches {
            try await prefetch.value
        }

        XCTAssertEqual(runs.current, 1)
        let first = try await coalescer.value(key: "feed", operation: counting(runs))
        let second = try await coalescer.value(key: "feed", operation: counting(runs))
        XCTAssertEqual([first, second], [1, 2])
    }

    func testAPrefetchCancelledWhileRunningNeverStoresItsResult() async throws {
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
        await waitUntil("the prefetch started") { coalescer.callerCount(for: "feed") == 1 }

        coalescer.cancel(key: "feed")
        await XCTAssertThrowsCoalescingError(.cancelled, try await prefetch.value)
        gate.open()

        let consumed = try await coalescer.value(key: "feed", operation: counting(runs))
        XCTAssertEqual(consumed, 2, "the cancelled prefetch's result was not stored")
    }

    func testCancelDropsAStoredResult() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        try await coalescer.prefetch(key: "feed", operation: counting(runs))

        coalescer.cancel(key: "feed")

        let consumed = try await coalescer.value(key: "feed", operation: counting(runs))
        XCTAssertEqual(consumed, 2)
    }

    /// Guarantee 15's "until": once `cancel(key:)`, `cancelAll()` or `forget(key:)` returns, the
    /// library holds nothing of the value it stored, on no path still on its way (the work's end,
    /// its delivery to the prefetcher, the observer's deliveries); without and with an observer.
    func testNothingHoldsAStoredValueOnceCancelCancelAllOrForgetReturns() async throws {
        let observe: @Sendable (CoalescingEvent<String>) -> Void = { _ in }
        for observed in [false, true] {
            for control in ["cancel(key:)", "cancelAll()", "forget(key:)"] {
                for run in 0..<300 {
                    let coalescer = PrefetchableTaskCoalescer<String, Prefetched>(
                        prefetchTimeout: .seconds(1), observer: observed ? observe : nil)
                    let weak = LockedBox(WeakPrefetched())
                    try await coalescer.prefetch(key: "feed") {
                        let value = Prefetched()
                        weak.value = WeakPrefetched(value: value)
                        return value
                    }
                    let found =
                        switch control {
                        case "cancel(key:)": coalescer.cancel(key: "feed")
                        case "cancelAll()": coalescer.cancelAll()
                        default: coalescer.forget(key: "feed")
                        }
                    XCTAssertTrue(found, "\(control), run \(run): the value was stored")
                    let observing = observed ? ", observed" : ""
                    XCTAssertNil(weak.value.value, "\(control) returned, run \(run)\(observing): the value lives")
                }
            }
        }
    }

    /// Guarantee 15's "until", raced: a drop that lands just after the prefetch's end stored the
    /// value, while the prefetch's own task is still on its way out, leaves nothing of the value
    /// alive once it returns. Two racers at once, each spinning until the value is stored and
    /// dropping it at once, thousands of times per control; half the coalescers observed.
    func testNoDroppedValueOutlivesADropThatRacesThePrefetchsEnd() {
        let racesPerControl = 2_500
        let observe: @Sendable (CoalescingEvent<String>) -> Void = { _ in }
        for control in ["cancel(key:)", "cancelAll()", "forget(key:)"] {
            let problems = LockedBox<[String]>([])
            let raced = LockedBox(0)
            DispatchQueue.concurrentPerform(iterations: 2) { racer in
                for run in 0..<racesPerControl / 2 {
                    let coalescer = PrefetchableTaskCoalescer<String, Prefetched>(
                        prefetchTimeout: .seconds(60), observer: run.isMultiple(of: 2) ? observe : nil)
                    let weak = LockedBox(WeakPrefetched())
                    let prefetched = DispatchSemaphore(value: 0)
                    let finished = LockedBox(false)
                    Task {
                        try? await coalescer.prefetch(key: "feed") {
                            let value = Prefetched()
                            weak.value = WeakPrefetched(value: value)
                            return value
                        }
                        finished.value = true
                        prefetched.signal()
                    }
                    // Until the decision has stored it: the drop then races the task's way out.
                    while coalescer.storedCount == 0, !finished.value {}
                    let found =
                        switch control {
                        case "cancel(key:)": coalescer.cancel(key: "feed")
                        case "cancelAll()": coalescer.cancelAll()
                        default: coalescer.forget(key: "feed")
                        }
                    if found, weak.value.value != nil {
                        problems.mutate { $0.append("racer \(racer), run \(run): the value lives") }
                    }
                    if found { raced.mutate { $0 += 1 } }
                    prefetched.wait()
                }
            }
            XCTAssertEqual(problems.value, [], "\(control) returned with the dropped value alive")
            XCTAssertEqual(raced.value, racesPerControl, "\(control) found no stored value to drop")
        }
    }

    func testCancelAllDropsEveryResultAndCancelsAllWork() async throws {
        let runs = self.runs
        let coalescer = makeCoalescer()
        try await coalescer.prefetch(key: "a", operation: counting(runs))
        let gate = AsyncGate()
        let running = Task { try await coalescer.value(key: "b", operation: gated(gate, runs)) }
        await waitUntil("the work started") { coalescer.callerCount(for: "b") == 1 }

        coalescer.cancelAll()

        await XCTAssertThrowsCoalescingError(.cancelled, try await running.value)
        let stored = coalescer.storedCount
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

        let consumed = try await coalescer.value(key: "feed", operation: counting(runs))
        XCTAssertEqual(consumed, 1)
    }

    func testAConsumerArrivingAsThePrefetchCompletesTakesItsValueWithoutRunningTheWorkAgain() async throws {
        // Guards bug 4 of issue 9: a consumer arriving after the prefetch's work had resumed its
        // callers, but before the result was stored, claimed the prefetch without joining it, ran
        // the work again, and kept the prefetcher from storing. The work now ends and stores in
        // one step, so the consumer arrives before the prefetcher's task has returned.
        // Guarantee 15: prefetch stores for one consumer.
        let runs = self.runs
        let coalescer = makeCoalescer()
        let work = AsyncGate()
        let prefetch = Task { try await coalescer.prefetch(key: "feed", operation: gated(work, runs)) }
        await waitUntil("the prefetch started") { coalescer.callerCount(for: "feed") == 1 }
        work.open()
        await waitUntil("the work ended") { coalescer.callerCount(for: "feed") == 0 }

        let consumed = try await coalescer.value(key: "feed", operation: counting(runs))
        try await prefetch.value

        XCTAssertEqual(consumed, 1, "the consumer took the prefetch's value")
        XCTAssertEqual(runs.current, 1, "the work did not run again")
        let stored = coalescer.storedCount
        XCTAssertEqual(stored, 0, "the value went to one consumer and was not stored as well")
    }

    func testAConsumerCancelledWhileJoiningAPrefetchPassesItsValueToTheNextConsumer() async throws {
        // Guards bug 5 of issue 9: a consumer that joined a prefetch in flight and was then
        // cancelled kept its claim, so the prefetched value was never stored.
        // Guarantee 15: prefetch stores for one consumer.
        let runs = self.runs
        let coalescer = makeCoalescer()
        let gate = AsyncGate()
        let (prefetch, consumer) = await prefetchWithAJoinedConsumer(coalescer, gate: gate)

        consumer.cancel()
        await XCTAssertThrowsCancellation(try await consumer.value)
        gate.open()
        try await prefetch.value

        let next = try await coalescer.value(key: "feed", operation: counting(runs))
        XCTAssertEqual(next, 1, "the next consumer took the prefetched value")
        XCTAssertEqual(runs.current, 1)
    }

    func testAPrefetchStillWaitingStoresItsValueWhenAnotherPrefetcherIsCancelled() async throws {
        // Guards bug 6 of issue 9: with two prefetchers for one key, cancelling the first dropped
        // the prefetch's ticket, so the second never stored the value.
        // Guarantee 15: prefetch stores for one consumer.
        let runs = self.runs
        let coalescer = makeCoalescer()
        let gate = AsyncGate()
        let first = Task { try await coalescer.prefetch(key: "feed", operation: gated(gate, runs)) }
        await waitUntil("the first prefetch started") { coalescer.callerCount(for: "feed") == 1 }
        let second = Task { try await coalescer.prefetch(key: "feed", operation: gated(gate, runs)) }
        await waitUntil("the second prefetch joined") { coalescer.callerCount(for: "feed") == 2 }

        first.cancel()
        await XCTAssertThrowsCancellation(try await first.value)
        gate.open()
        try await second.value

        let consumed = try await coalescer.value(key: "feed", operation: counting(runs))
        XCTAssertEqual(consumed, 1, "the value was stored for the consumer")
        XCTAssertEqual(runs.current, 1)
    }

    func testRandomInterleavingsOfPrefetchConsumeAndCancellationKeepTheRules() async throws {
        // Guards bugs 4, 5 and 6 of issue 9 across interleavings the tests above do not pin down:
        // a consumer racing the prefetch's end, a claimant withdrawing before or after the work ends,
        // prefetchers cancelled in any order, and cancellation of the key at any point.
        // Guarantee 15: prefetch stores for one consumer.
        let environment = ProcessInfo.processInfo.environment
        let seed =
            environment["COALESCING_PREFETCH_STRESS_SEED"].flatMap(UInt64.init) ?? .random(in: 0...UInt64.max)
        print("PrefetchableTaskCoalescer stress seed \(seed); replay with COALESCING_PREFETCH_STRESS_SEED=\(seed)")
        var random = SplitMix64(seed: seed)
        let keys = ["a", "b", "c"]
        let rounds = 1500

        for round in 0..<rounds {
            let plans = keys.map { _ in StressPlan.random(using: &random) }
            let coalescer = makeCoalescer()
            let problems = await withTaskGroup(of: [String].self) { group in
                for (key, plan) in zip(keys, plans) {
                    group.addTask { await plan.run(on: coalescer, key: key) }
                }
                return await group.reduce(into: []) { $0 += $1 }
            }
            for problem in problems {
                XCTFail("seed \(seed), round \(round): \(problem)")
            }
            if !problems.isEmpty { return }
        }
    }
}

/// One random round for one key: prefetchers start gated work, then the test opens the gate,
/// launches a consumer, cancels tasks and the key in a random order, with no waiting between.
private struct StressPlan {
    enum Mode {
        /// Nothing cancelled and one prefetcher kept: the prefetch's value must reach exactly
        /// one consumer, with no second run.
        case strict
        case keyCancelled
        case everyPrefetcherCancelled
    }

    enum Action {
        case openGate, launchConsumer, cancelConsumer, cancelFirstPrefetcher, cancelSecondPrefetcher
        case cancelKey, yield
    }

    let mode: Mode
    let prefetchers: Int
    let actions: [Action]

    static func random(using random: inout SplitMix64) -> StressPlan {
        let mode = [Mode.strict, .strict, .keyCancelled, .everyPrefetcherCancelled].randomElement(using: &random)!
        let prefetchers = Int.random(in: 1...2, using: &random)
        var actions: [Action] = [.openGate, .launchConsumer]
        if Bool.random(using: &random) {
            actions.append(.cancelConsumer)
        }
        switch mode {
        case .strict:
            if prefetchers == 2, Bool.random(using: &random) {
                actions.append(.cancelFirstPrefetcher)
            }
        case .keyCancelled:
            actions.append(.cancelKey)
            if Bool.random(using: &random) {
                actions.append(.cancelFirstPrefetcher)
            }
        case .everyPrefetcherCancelled:
            actions.append(.cancelFirstPrefetcher)
            if prefetchers == 2 {
                actions.append(.cancelSecondPrefetcher)
            }
        }
        actions += Array(repeating: .yield, count: Int.random(in: 0...3, using: &random))
        actions.shuffle(using: &random)
        return StressPlan(mode: mode, prefetchers: prefetchers, actions: actions)
    }

    /// Runs the round; returns the rules it saw broken.
    func run(on coalescer: PrefetchableTaskCoalescer<String, Int>, key: String) async -> [String] {
        let runs = Counter()
        let gate = AsyncGate()
        let outcomes = LockedBox<[String: [Result<Int, Error>]]>([:])
        @Sendable func record(_ caller: String, _ result: Result<Int, Error>) {
            outcomes.mutate { $0[caller, default: []].append(result) }
        }
        func launch(_ caller: String, _ body: @escaping @Sendable () async throws -> Int) -> Task<Void, Never> {
            Task {
                do {
                    record(caller, .success(try await body()))
                } catch {
                    record(caller, .failure(error))
                }
            }
        }

        var prefetchTasks: [Task<Void, Never>] = []
        for index in 0..<prefetchers {
            prefetchTasks.append(
                launch("prefetcher \(index)") {
                    try await coalescer.prefetch(key: key, operation: gated(gate, runs))
                    return 0
                })
            await waitUntil("prefetcher \(index) joined") { coalescer.callerCount(for: key) == index + 1 }
        }
        var consumer: Task<Void, Never>?
        var consumerCancelled = false
        for action in actions {
            switch action {
            case .openGate: gate.open()
            case .launchConsumer:
                consumer = launch("consumer") {
                    try await coalescer.value(key: key, operation: gated(gate, runs))
                }
                if consumerCancelled { consumer?.cancel() }
            case .cancelConsumer:
                consumerCancelled = true
                consumer?.cancel()
            case .cancelFirstPrefetcher: prefetchTasks[0].cancel()
            case .cancelSecondPrefetcher: prefetchTasks[1].cancel()
            case .cancelKey: coalescer.cancel(key: key)
            case .yield: await Task.yield()
            }
        }
        for task in prefetchTasks + [consumer].compactMap({ $0 }) {
            await task.value
        }

        var problems: [String] = []
        let seen = outcomes.value
        for (caller, results) in seen where results.count != 1 {
            problems.append("\(key): \(caller) returned or threw \(results.count) times")
        }
        if seen.count != prefetchers + 1 {
            problems.append("\(key): \(seen.count) of \(prefetchers + 1) calls ended")
        }
        // Guarantee 11: `CancellationError` for a caller whose own task was cancelled,
        // `CoalescingError.cancelled` for the callers of the key's work once it was cancelled.
        let withdrawing: Set<String> = Set(
            actions.compactMap { action in
                switch action {
                case .cancelConsumer: "consumer"
                case .cancelFirstPrefetcher: "prefetcher 0"
                case .cancelSecondPrefetcher: "prefetcher 1"
                default: nil
                }
            })
        for (caller, results) in seen {
            for case .failure(let error) in results {
                let heard =
                    (error is CancellationError && withdrawing.contains(caller))
                    || (error as? CoalescingError == .cancelled && actions.contains(.cancelKey))
                if !heard {
                    problems.append("\(key): \(caller) threw unexpected \(error)")
                }
            }
        }
        let first = try? seen["consumer"]?.first?.get()
        guard let second = try? await coalescer.value(key: key, operation: counting(runs)) else {
            return problems + ["\(key): the second consumer failed"]
        }
        if second == first {
            problems.append("\(key): value \(second) was served to two consumers")
        }
        let runsInRound = runs.current
        // Whatever the round left stored is the next consumer's alone, and costs no run.
        guard (try? await coalescer.prefetch(key: key, operation: counting(runs))) != nil else {
            return problems + ["\(key): the closing prefetch failed"]
        }
        let runsBefore = runs.current
        let third = try? await coalescer.value(key: key, operation: counting(runs))
        if runs.current != runsBefore || third == nil || third == first || third == second {
            problems.append(
                "\(key): the closing consumer got \(String(describing: third)) after \(String(describing: first)), \(second)"
            )
        }

        guard mode == .strict else { return problems }
        let kept = "prefetcher \(prefetchers - 1)"
        if case .failure(let error) = seen[kept]?.first {
            problems.append("\(key): \(kept), never cancelled, threw \(error)")
        }
        // The prefetch ran once and its value went to the consumer, or to the next one if the
        // consumer was cancelled before getting it.
        switch first {
        case .some(let value) where value != 1 || second != 2 || runsInRound != 2:
            problems.append("\(key): the consumer got \(value), the next \(second), after \(runsInRound) runs")
        case nil where second != 1 || runsInRound != 1:
            problems.append("\(key): after a cancelled consumer, the next got \(second), after \(runsInRound) runs")
        default:
            break
        }
        return problems
    }
}

/// A stored value, watched through a weak reference to it.
private final class Prefetched: Sendable {}

private struct WeakPrefetched: @unchecked Sendable {
    // @unchecked: read and written only inside a `LockedBox`.
    weak var value: Prefetched?
}

/// Work that counts its runs and returns the run number.
private func counting(_ runs: Counter) -> @Sendable () async throws -> Int {
    { runs.increment() }
}
