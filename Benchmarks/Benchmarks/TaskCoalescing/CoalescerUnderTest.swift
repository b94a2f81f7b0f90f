import CoalescingOperations

/// The work every waiter asks for; only the first caller's ever runs.
typealias Work = @Sendable () async throws -> Int

/// A task coalescer seen through two closures, so that one benchmark body measures them all.
struct CoalescerUnderTest: Sendable {
    /// Joins the work in flight for `key`, or starts `work`.
    let join: @Sendable (_ key: Int, _ work: @escaping Work) async throws -> Int
    /// A call onto the coalescer's actor that changes nothing: the actor runs it after every call
    /// already queued there, so once it returns, every waiter that had arrived has joined.
    let probe: @Sendable () async -> Void
}

/// The coalescers measured; benchmark names end with the raw value.
enum CoalescerKind: String, CaseIterable {
    /// `InFlightTaskCoalescer`: waiters park continuations and may leave at once.
    case oursInFlight = "ours-inflight"
    /// `PrefetchableTaskCoalescer.deduplicated`, which adds a look for a prefetched result.
    case oursPrefetchable = "ours-prefetchable"
    /// The seed-001 actor: a `[Key: Task]` dictionary; waiters await `Task.value`.
    case taskDictionary = "task-dictionary"

    /// A new, empty coalescer of this kind.
    func make() -> CoalescerUnderTest {
        switch self {
        case .oursInFlight:
            let coalescer = InFlightTaskCoalescer<Int, Int>()
            return CoalescerUnderTest(
                join: { try await coalescer.deduplicated(key: $0, operation: $1) },
                probe: { _ = await coalescer.cancel(key: -1) })
        case .oursPrefetchable:
            let coalescer = PrefetchableTaskCoalescer<Int, Int>(prefetchTimeout: .seconds(30))
            return CoalescerUnderTest(
                join: { try await coalescer.deduplicated(key: $0, operation: $1) },
                probe: { await coalescer.invalidate(key: -1) })
        case .taskDictionary:
            let coalescer = TaskDictionaryCoalescer<Int, Int>()
            return CoalescerUnderTest(
                join: { try await coalescer.deduplicated(key: $0, operation: $1) },
                probe: { _ = await coalescer.cancel(key: -1) })
        }
    }
}
