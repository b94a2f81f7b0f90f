import Foundation
import TestSupport
import XCTest

@testable import CoalescingOperations

/// The task coalescers under random interleavings of start, join, withdrawal (a cancelled task),
/// timeouts, both abandonment policies, cancel, forget and cancelAll: every caller hears back
/// exactly once (Guarantees 14, 16, 17 and 18), and the statistics and the events add up exactly
/// (Guarantees 21 and 22). See the Guarantees article.
///
/// Seeded: a failure prints the seed, and `COALESCING_TASK_STRESS_SEED=<seed>` replays its plan.
final class TaskCoalescerStressTests: XCTestCase {
    struct WorkFailed: Error {}

    func testRandomInterleavingsOfEveryControlKeepTheCountsExact() async throws {
        let seed = Self.seed()
        var random = SplitMix64(seed: seed)
        for round in 0..<1_000 {
            let plan = Plan.random(allowingPrefetches: false, using: &random)
            let problems = await plan.run { observer in
                let coalescer = InFlightTaskCoalescer<String, Int>(observer: observer)
                return Subject(
                    call: { key, _, timeout, policy, work in
                        try await coalescer.value(
                            key: key, timeout: timeout, whenAbandoned: policy, operation: work)
                    },
                    cancel: { coalescer.cancel(key: $0) }, forget: { coalescer.forget(key: $0) },
                    cancelAll: { coalescer.cancelAll() }, statistics: { coalescer.statistics })
            }
            for problem in problems {
                XCTFail("seed \(seed), round \(round): \(problem); replay with COALESCING_TASK_STRESS_SEED=\(seed)")
            }
            if !problems.isEmpty { return }
        }
    }

    func testRandomInterleavingsWithPrefetchesKeepTheCountsExact() async throws {
        let seed = Self.seed()
        var random = SplitMix64(seed: seed)
        for round in 0..<1_000 {
            let plan = Plan.random(allowingPrefetches: true, using: &random)
            let problems = await plan.run { observer in
                let coalescer = PrefetchableTaskCoalescer<String, Int>(
                    prefetchTimeout: .seconds(60), observer: observer)
                return Subject(
                    call: { key, isPrefetch, timeout, policy, work in
                        guard isPrefetch else {
                            return try await coalescer.value(
                                key: key, timeout: timeout, whenAbandoned: policy, operation: work)
                        }
                        try await coalescer.prefetch(key: key, timeout: timeout, whenAbandoned: policy, operation: work)
                        return nil
                    },
                    cancel: { coalescer.cancel(key: $0) }, forget: { coalescer.forget(key: $0) },
                    cancelAll: { coalescer.cancelAll() }, statistics: { coalescer.statistics })
            }
            for problem in problems {
                XCTFail("seed \(seed), round \(round): \(problem); replay with COALESCING_TASK_STRESS_SEED=\(seed)")
            }
            if !problems.isEmpty { return }
        }
    }

    private static func seed() -> UInt64 {
        let environment = ProcessInfo.processInfo.environment
        let seed = environment["COALESCING_TASK_STRESS_SEED"].flatMap(UInt64.init) ?? .random(in: 0...UInt64.max)
        print("Task coalescer stress seed \(seed); replay with COALESCING_TASK_STRESS_SEED=\(seed)")
        return seed
    }
}

/// A coalescer seen through closures, so that one plan runs on either.
private struct Subject: Sendable {
    /// Calls the coalescer; a prefetch returns nil.
    let call:
        @Sendable (
            _ key: String, _ isPrefetch: Bool, _ timeout: Duration?, _ policy: AbandonedWorkPolicy,
            _ work: @escaping @Sendable () async throws -> Int
        ) async throws -> Int?
    let cancel: @Sendable (String) -> Bool
    let forget: @Sendable (String) -> Bool
    let cancelAll: @Sendable () -> Bool
    let statistics: @Sendable () -> CoalescingStatistics
}

/// One random round: a sequence of steps run with no waiting between them, then every gate opened.
private struct Plan {
    enum Step {
        case call(key: String, isPrefetch: Bool, timeout: Duration?, policy: AbandonedWorkPolicy, fails: Bool)
        case withdraw(caller: Int)
        case open(key: String)
        case cancel(key: String)
        case forget(key: String)
        case cancelAll
        case yield
    }

    static let keys = ["a", "b", "c"]
    let steps: [Step]

    static func random(allowingPrefetches allowsPrefetch: Bool, using random: inout SplitMix64) -> Plan {
        var steps: [Step] = []
        var callers = 0
        for _ in 0..<Int.random(in: 10...40, using: &random) {
            let key = keys.randomElement(using: &random)!
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<45:
                let timeout: Duration? =
                    Int.random(in: 0..<4, using: &random) == 0
                    ? .microseconds(Int.random(in: 0...2_000, using: &random)) : nil
                steps.append(
                    .call(
                        key: key, isPrefetch: allowsPrefetch && Bool.random(using: &random), timeout: timeout,
                        policy: Bool.random(using: &random) ? .cancel : .runToCompletion,
                        fails: Int.random(in: 0..<5, using: &random) == 0))
                callers += 1
            case 45..<60 where callers > 0: steps.append(.withdraw(caller: Int.random(in: 0..<callers, using: &random)))
            case 60..<70: steps.append(.open(key: key))
            case 70..<78: steps.append(.cancel(key: key))
            case 78..<88: steps.append(.forget(key: key))
            case 88..<90: steps.append(.cancelAll)
            default: steps.append(.yield)
            }
        }
        return Plan(steps: steps)
    }

    /// Runs the plan on the coalescer `make` creates; returns the rules it saw broken.
    func run(_ make: (@escaping @Sendable (CoalescingEvent<String>) -> Void) -> Subject) async -> [String] {
        let events = LockedBox<[CoalescingEvent<String>]>([])
        let subject = make { event in events.mutate { $0.append(event) } }
        let gates = LockedBox([String: AsyncGate]())
        var forgotten: [String: Int] = [:]
        let runs = Counter()
        /// Each key's work waits at the key's gate of the moment; opening a gate replaces it.
        @Sendable func gate(for key: String) -> AsyncGate {
            gates.mutate { gates in
                if let gate = gates[key] { return gate }
                let gate = AsyncGate()
                gates[key] = gate
                return gate
            }
        }
        var callers: [Task<Result<Int?, Error>, Never>] = []
        for step in steps {
            switch step {
            case .call(let key, let isPrefetch, let timeout, let policy, let fails):
                callers.append(
                    Task {
                        do {
                            return .success(
                                try await subject.call(key, isPrefetch, timeout, policy) {
                                    let run = runs.increment()
                                    try await gate(for: key).wait()
                                    if fails { throw TaskCoalescerStressTests.WorkFailed() }
                                    return run
                                })
                        } catch {
                            return .failure(error)
                        }
                    })
            case .withdraw(let caller): callers[caller].cancel()
            case .open(let key): gates.mutate { $0.removeValue(forKey: key) }?.open()
            case .cancel(let key): _ = subject.cancel(key)
            case .forget(let key):
                if subject.forget(key) {
                    forgotten[key, default: 0] += 1
                }
            case .cancelAll: _ = subject.cancelAll()
            case .yield: await Task.yield()
            }
        }
        // Every key's work may end now, and work started later ends at once.
        let held = gates.mutate { gates in
            defer {
                for key in Self.keys {
                    gates[key] = Self.openGate
                }
            }
            return Array(gates.values)
        }
        for gate in held {
            gate.open()
        }
        var outcomes: [Result<Int?, Error>] = []
        for caller in callers {
            outcomes.append(await caller.value)
        }
        await waitUntil("all work ended") {
            let statistics = subject.statistics()
            return statistics.workInFlight == 0 && statistics.workStarted == runs.current
        }
        // Each event reaches the observer just after the change it reports.
        await waitUntil("every event was delivered") {
            Self.statistics(of: events.value, taking: subject.statistics()) == subject.statistics()
        }
        var order = EventOrder()
        for event in events.value {
            order.follow(event)
        }
        return check(outcomes, subject.statistics(), events.value) + order.problems(forgotten: forgotten)
    }

    /// The statistics the events add up to. Consumers that took a stored result are counted, but
    /// no event reports them: they are taken from `statistics`.
    private static func statistics(
        of events: [CoalescingEvent<String>], taking statistics: CoalescingStatistics
    ) -> CoalescingStatistics {
        var fromEvents = CoalescingStatistics()
        for event in events {
            switch event {
            // Every task work starts with the caller that started it.
            case .workStarted:
                fromEvents.workStarted += 1
                fromEvents.callersArrived += 1
            case .callerJoined:
                fromEvents.callersJoined += 1
                fromEvents.callersArrived += 1
            case .callerWithdrawn(_, _, .withdrawn): fromEvents.callersWithdrawn += 1
            case .callerWithdrawn(_, _, .timedOut): fromEvents.callersTimedOut += 1
            case .workEnded(_, _, let outcome, _, let served, _):
                fromEvents.callersServed += served
                switch outcome {
                case .succeeded: fromEvents.workSucceeded += 1
                case .failed: fromEvents.workFailed += 1
                case .cancelled: fromEvents.workCancelled += 1
                }
            case .priorityChanged, .workStalled: break
            }
        }
        let takenFromStore = statistics.callersJoined - fromEvents.callersJoined
        fromEvents.callersJoined += takenFromStore
        fromEvents.callersArrived += takenFromStore
        fromEvents.callersServed += takenFromStore
        return fromEvents
    }

    private static let openGate: AsyncGate = {
        let gate = AsyncGate()
        gate.open()
        return gate
    }()

    /// Sets what the callers saw against the statistics and the events.
    private func check(
        _ outcomes: [Result<Int?, Error>], _ statistics: CoalescingStatistics, _ events: [CoalescingEvent<String>]
    ) -> [String] {
        let hasPrefetches = steps.contains { step in
            if case .call(_, true, _, _, _) = step { true } else { false }
        }
        var problems: [String] = []
        // Guarantee 11: a caller hears `CancellationError` only if its own task was cancelled, and
        // `CoalescingError.cancelled` only if its key's work was cancelled for everyone after it
        // called (a step run before its call cannot reach it).
        var keys: [String] = []
        var withdrawing = Set<Int>()
        var cancellable = Set<Int>()
        for step in steps {
            switch step {
            case .call(let key, _, _, _, _): keys.append(key)
            case .withdraw(let caller): withdrawing.insert(caller)
            case .cancel(let key): cancellable.formUnion(keys.indices.filter { keys[$0] == key })
            case .cancelAll: cancellable.formUnion(keys.indices)
            case .open, .forget, .yield: break
            }
        }
        var answered = 0
        var timedOut = 0
        var cancelled = 0
        for (caller, outcome) in outcomes.enumerated() {
            switch outcome {
            case .success: answered += 1
            case .failure(is TaskCoalescerStressTests.WorkFailed): answered += 1
            case .failure(CoalescingError.timedOut): timedOut += 1
            case .failure(CoalescingError.cancelled) where cancellable.contains(caller):
                answered += 1  // served with the work's cancellation
            case .failure(is CancellationError) where withdrawing.contains(caller): cancelled += 1
            case .failure(let error): problems.append("caller \(caller) of \(keys[caller]): unexpected error \(error)")
            }
        }
        let arrived = statistics.workStarted + statistics.callersJoined
        if statistics.callersServed + statistics.callersWithdrawn + statistics.callersTimedOut != arrived {
            problems.append("callers arrived \(arrived), left: \(statistics)")
        }
        if statistics.callersTimedOut != timedOut {
            problems.append("\(timedOut) callers timed out, counted \(statistics.callersTimedOut)")
        }
        // A caller cancelled before it arrived is not counted, nor is a prefetcher that found a
        // result stored; a caller served with the work's cancellation is counted as served.
        let notArrived = outcomes.count - arrived
        if notArrived < 0 || statistics.callersWithdrawn > cancelled {
            problems.append("\(outcomes.count) callers, \(cancelled) cancelled, statistics \(statistics)")
        }
        // Without prefetches, exactly: those withdrawn or never arrived threw `CancellationError`,
        // and every caller served was answered.
        let leftFirst = notArrived + statistics.callersWithdrawn
        if !hasPrefetches, leftFirst != cancelled || answered != statistics.callersServed {
            problems.append("\(answered) answered, \(cancelled) cancelled, \(notArrived) never arrived: \(statistics)")
        }
        if statistics.workEnded != statistics.workStarted {
            problems.append("work started and ended differ: \(statistics)")
        }

        let fromEvents = Self.statistics(of: events, taking: statistics)
        let joinEvents = events.filter { event in
            if case .callerJoined = event { true } else { false }
        }
        if !hasPrefetches, joinEvents.count != statistics.callersJoined {
            problems.append("\(joinEvents.count) callers reported joining, \(statistics.callersJoined) counted")
        }
        if fromEvents != statistics {
            problems.append("the events add up to \(fromEvents), the statistics say \(statistics)")
        }
        return problems
    }
}
