import CoalescingOperations
import Synchronization

/// The work every caller asks for; only the first caller's ever runs.
typealias Work = @Sendable () async throws -> Int

/// A task coalescer seen through two closures, so that one benchmark body measures them all.
struct CoalescerUnderTest: Sendable {
    /// Joins the work in flight for `key`, or starts `work`.
    let join: @Sendable (_ key: Int, _ work: @escaping Work) async throws -> Int
    /// Returns once `callers` callers that have arrived have joined the work in flight.
    ///
    /// Ours register on the caller's own thread, so their statistics say when every caller has
    /// joined. The seed-001 actor registers on the actor: a call onto it that changes nothing runs
    /// after every call already queued there.
    let waitUntilJoined: @Sendable (_ callers: Int) async -> Void
}

/// The coalescers measured; benchmark names end with the raw value.
enum CoalescerKind: String, CaseIterable {
    /// `InFlightTaskCoalescer`: callers park continuations and may withdraw at once.
    case oursInFlight = "ours-inflight"
    /// `InFlightTaskCoalescer`, every caller with a timeout (that never passes during the run).
    case oursInFlightWithTimeout = "ours-inflight-timeout"
    /// `InFlightTaskCoalescer` with an observer that counts the events.
    case oursInFlightObserved = "ours-inflight-observer"
    /// `PrefetchableTaskCoalescer.value`, which adds a look for a prefetched result.
    case oursPrefetchable = "ours-prefetchable"
    /// The seed-001 actor: a `[Key: Task]` dictionary; callers await `Task.value`.
    case taskDictionary = "task-dictionary"

    /// A new, empty coalescer of this kind.
    func make() -> CoalescerUnderTest {
        switch self {
        case .oursInFlight:
            let coalescer = InFlightTaskCoalescer<Int, Int>()
            return CoalescerUnderTest(
                join: { try await coalescer.value(key: $0, operation: $1) },
                waitUntilJoined: { callers in await waitUntil(callers, joined: { coalescer.statistics }) })
        case .oursInFlightWithTimeout:
            let coalescer = InFlightTaskCoalescer<Int, Int>()
            return CoalescerUnderTest(
                join: { try await coalescer.value(key: $0, timeout: .seconds(60), operation: $1) },
                waitUntilJoined: { callers in await waitUntil(callers, joined: { coalescer.statistics }) })
        case .oursInFlightObserved:
            let events = Atomic(0)
            let coalescer = InFlightTaskCoalescer<Int, Int>(observer: { _ in
                events.add(1, ordering: .relaxed)
            })
            return CoalescerUnderTest(
                join: { try await coalescer.value(key: $0, operation: $1) },
                waitUntilJoined: { callers in await waitUntil(callers, joined: { coalescer.statistics }) })
        case .oursPrefetchable:
            let coalescer = PrefetchableTaskCoalescer<Int, Int>(prefetchTimeout: .seconds(30))
            return CoalescerUnderTest(
                join: { try await coalescer.value(key: $0, operation: $1) },
                waitUntilJoined: { callers in await waitUntil(callers, joined: { coalescer.statistics }) })
        case .taskDictionary:
            let coalescer = TaskDictionaryCoalescer<Int, Int>()
            return CoalescerUnderTest(
                join: { try await coalescer.deduplicated(key: $0, operation: $1) },
                waitUntilJoined: { _ in _ = await coalescer.cancel(key: -1) })
        }
    }
}

/// Yields until `statistics` count `callers` joined callers.
private func waitUntil(_ callers: Int, joined statistics: () -> CoalescingStatistics) async {
    while statistics().callersJoined < callers {
        await Task.yield()
    }
}
