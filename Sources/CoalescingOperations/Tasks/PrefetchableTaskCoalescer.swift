/// Coalesces identical concurrent async work like ``InFlightTaskCoalescer``, and can fetch a
/// result ahead of time for the one consumer that needs it next.
///
/// Start fetching early (say, during a splash screen) with ``prefetch(key:name:operation:)``; when
/// the screen appears, ``deduplicated(key:name:operation:)`` takes the result if it is ready, or
/// joins the prefetch still in flight:
///
/// ```swift
/// let feed = PrefetchableTaskCoalescer<FeedKey, Feed>(prefetchTimeout: .seconds(30))
///
/// // Splash screen:
/// Task { try await feed.prefetch(key: .explore) { try await api.exploreFeed() } }
/// // Feed screen, moments later: no second request.
/// let explore = try await feed.deduplicated(key: .explore) { try await api.exploreFeed() }
/// ```
///
/// The rules:
/// - Only ``prefetch(key:name:operation:)`` stores a result, and it stores it for one consumer:
///   the first ``deduplicated(key:name:operation:)`` takes it; the next starts new work.
/// - A consumer that joins a prefetch in flight takes its result then, and nothing is stored; if
///   it leaves first (its task cancelled), the result is stored for the next consumer.
/// - The result is stored as long as one prefetcher waits for it, whichever others are cancelled.
/// - ``deduplicated(key:name:operation:)`` never stores its own result: coalescing is not caching.
/// - A stored result expires `prefetchTimeout` after it arrived, and is released at the next call
///   to the coalescer.
/// - A result whose prefetch was invalidated while it ran is never stored.
public actor PrefetchableTaskCoalescer<Key: Hashable & Sendable, Value: Sendable> {
    /// A result waiting for its consumer.
    private struct Prefetched {
        let value: Value
        let expiry: ContinuousClock.Instant
    }

    /// Marks one piece of work as a prefetch, so that its result is stored when the work ends.
    ///
    /// It belongs to the work, not to a prefetcher's task: any prefetcher may be cancelled and the
    /// result is still stored for the others. Removed from `prefetching` when invalidated, so that a
    /// prefetch invalidated while it ran never stores.
    private final class Ticket {
        let call: InFlightCall<Value>
        /// Set while a consumer that joined the work waits for it: the result is that consumer's,
        /// not stored. Cleared if it leaves without the result.
        var isClaimed = false

        init(call: InFlightCall<Value>) {
            self.call = call
        }
    }

    private var calls = InFlightCallTable<Key, Value>()
    private var prefetched: [Key: Prefetched] = [:]
    private var prefetching: [Key: Ticket] = [:]
    /// The earliest expiry among `prefetched`, or later; nil when nothing is stored.
    private var nextExpiry: ContinuousClock.Instant?
    private let prefetchTimeout: Duration
    private let now: @Sendable () -> ContinuousClock.Instant
    /// Awaited after a prefetch's work ended and before its result is stored, by every party that
    /// would store it; for tests, to hold the store back and reproduce a consumer arriving in that
    /// window. Nil outside tests.
    private var beforeSettlingForTesting: (@Sendable () async -> Void)?

    /// Creates a coalescer whose prefetched results expire after `prefetchTimeout`.
    ///
    /// - Parameter prefetchTimeout: How long a prefetched result waits for its consumer. Match it
    ///   to the flow: seconds for a splash screen, a minute for an onboarding flow.
    public init(prefetchTimeout: Duration) {
        self.init(prefetchTimeout: prefetchTimeout, now: { ContinuousClock.now })
    }

    /// Creates a coalescer that reads the time from `now`, so that tests can move it.
    init(prefetchTimeout: Duration, now: @escaping @Sendable () -> ContinuousClock.Instant) {
        self.prefetchTimeout = prefetchTimeout
        self.now = now
    }

    /// Returns the prefetched result for `key` if one is waiting, or the result of the work in
    /// flight for `key`, starting `operation` if there is none.
    ///
    /// Takes a prefetched result (the next call will not find it), and never stores its own.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work.
    ///   - name: A name for the task running `operation`, shown by debuggers (Swift 6.2 and later).
    ///   - operation: The work, run in a task of its own if this call starts it.
    /// - Returns: The value, the same for every caller of the same work.
    /// - Throws: The work's error; or `CancellationError` if this caller's task was cancelled or the
    ///   work was invalidated.
    public func deduplicated(
        key: Key,
        name: String? = nil,
        operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        try Task.checkCancellation()
        releaseExpired()
        if let waiting = prefetched.removeValue(forKey: key) {
            return waiting.value
        }
        // Claim only by joining the prefetch's own work: new work is not the prefetch.
        if let ticket = prefetching[key], !ticket.isClaimed {
            if let slot = joinPrefetch(ticket, key: key) {
                return try await claim(ticket, waitingIn: slot, key: key)
            }
            // Its work has just ended, and its result may have been stored only now.
            if let waiting = prefetched.removeValue(forKey: key) {
                return waiting.value
            }
        }
        let (call, slot) = reserve(key, name: name, operation: operation)
        return try await call.wait(in: slot)
    }

    /// Fetches the result for `key` ahead of time and keeps it for the next consumer.
    ///
    /// Does nothing if a fresh result is already waiting; joins the prefetch already in flight for
    /// `key`, if any, without storing a second time.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work.
    ///   - name: A name for the task running `operation`, shown by debuggers (Swift 6.2 and later).
    ///   - operation: The work, run in a task of its own if this call starts it.
    /// - Throws: The work's error; or `CancellationError` if this caller's task was cancelled or
    ///   the prefetch was invalidated.
    public func prefetch(
        key: Key,
        name: String? = nil,
        operation: @escaping @Sendable () async throws -> Value
    ) async throws {
        try Task.checkCancellation()
        releaseExpired()
        guard prefetched[key] == nil else { return }
        let call: InFlightCall<Value>
        let slot: Int
        if let ticket = prefetching[key], let joined = joinPrefetch(ticket, key: key) {
            (call, slot) = (ticket.call, joined)
        } else {
            guard prefetched[key] == nil else { return }
            (call, slot) = reserve(key, name: name, operation: operation)
            // A ticket for other work is stale: that work has ended, and was settled just above.
            if prefetching[key]?.call !== call {
                prefetching[key] = Ticket(call: call)
            }
        }
        do {
            _ = try await call.wait(in: slot)
        } catch {
            await settleAfterTestHook(for: key)
            throw error
        }
        // Store before returning, so that a consumer called after this returns finds the result.
        await settleAfterTestHook(for: key)
    }

    /// Drops the result stored for `key`, and cancels the work in flight for it, prefetch or not:
    /// its callers throw `CancellationError`. Use it before a refresh.
    ///
    /// - Parameter key: The key to invalidate.
    public func invalidate(key: Key) async {
        prefetched[key] = nil
        prefetching[key] = nil
        _ = calls.cancel(key)
    }

    /// Drops every stored result and cancels all work in flight, for example when the user logs out.
    public func invalidateAll() async {
        prefetched.removeAll()
        prefetching.removeAll()
        nextExpiry = nil
        calls.cancelAll()
    }

    /// How many callers wait for the work in flight for `key`; for tests.
    func waitingCount(for key: Key) -> Int {
        calls.waitingCount(for: key)
    }

    /// How many results are stored, expired or not; for tests.
    var storedCount: Int {
        prefetched.count
    }

    /// Sets the hook awaited before a prefetch's ended work is stored; for tests.
    func setBeforeSettlingForTesting(_ hook: (@Sendable () async -> Void)?) {
        beforeSettlingForTesting = hook
    }

    private func reserve(
        _ key: Key, name: String?, operation: @escaping @Sendable () async throws -> Value
    ) -> (call: InFlightCall<Value>, slot: Int) {
        calls.reserve(key, priority: nil, name: name, operation: operation) { call in
            await self.workEnded(call, key: key)
        }
    }

    /// Reserves a place in the prefetch's work if it still runs. Otherwise settles it: the work
    /// may have ended on its own task since this call settled, and must not run again.
    private func joinPrefetch(_ ticket: Ticket, key: Key) -> Int? {
        if let slot = ticket.call.reserve(escalatingTo: Task.currentPriority) {
            return slot
        }
        settlePrefetch(for: key)
        return nil
    }

    /// Waits in the prefetch's work as the consumer its result is for.
    private func claim(_ ticket: Ticket, waitingIn slot: Int, key: Key) async throws -> Value {
        ticket.isClaimed = true
        do {
            let value = try await ticket.call.wait(in: slot)
            if prefetching[key] === ticket {
                prefetching[key] = nil
            }
            return value
        } catch {
            // Left without the result (cancelled, most likely): it is the next consumer's.
            ticket.isClaimed = false
            settlePrefetch(for: key)
            throw error
        }
    }

    /// Runs on the actor once the work's waiters were resumed, so that storing a prefetch's result
    /// does not depend on any one prefetcher's task getting back.
    private func workEnded(_ call: InFlightCall<Value>, key: Key) async {
        calls.remove(key, ifSameAs: call)
        await settleAfterTestHook(for: key)
    }

    private func settleAfterTestHook(for key: Key) async {
        if let beforeSettlingForTesting {
            await beforeSettlingForTesting()
        }
        settlePrefetch(for: key)
    }

    /// Stores the result of the prefetch for `key` if its work has ended and no consumer claimed
    /// it. The work's end, each prefetcher, a leaving claimant and a call that finds the work
    /// ended all try, and the first one on the actor stores, so the result waits on no one task.
    private func settlePrefetch(for key: Key) {
        guard let ticket = prefetching[key], let ending = ticket.call.ending else { return }
        guard case .success(let value) = ending else {
            prefetching[key] = nil
            return
        }
        // The claimant takes the value when it gets back; it releases the claim if it does not.
        guard !ticket.isClaimed else { return }
        prefetching[key] = nil
        store(value, for: key)
    }

    private func store(_ value: Value, for key: Key) {
        let expiry = now().advanced(by: prefetchTimeout)
        prefetched[key] = Prefetched(value: value, expiry: expiry)
        nextExpiry = min(nextExpiry ?? expiry, expiry)
    }

    /// Drops expired results. Sweeps only once the earliest expiry has passed, so most calls pay
    /// one comparison.
    private func releaseExpired() {
        guard let nextExpiry, now() >= nextExpiry else { return }
        let now = now()
        prefetched = prefetched.filter { $0.value.expiry > now }
        self.nextExpiry = prefetched.values.map(\.expiry).min()
    }
}
