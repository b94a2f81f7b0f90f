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
/// - A consumer that joins a prefetch in flight takes its result then, and nothing is stored.
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

    /// Identifies one prefetch in flight, so that a prefetch invalidated while it ran never stores.
    private final class Ticket {
        /// Set when a consumer joined the prefetch in flight: the result is then already taken.
        var isClaimed = false
    }

    private var calls = InFlightCallTable<Key, Value>()
    private var prefetched: [Key: Prefetched] = [:]
    private var prefetching: [Key: Ticket] = [:]
    /// The earliest expiry among `prefetched`, or later; nil when nothing is stored.
    private var nextExpiry: ContinuousClock.Instant?
    private let prefetchTimeout: Duration
    private let now: @Sendable () -> ContinuousClock.Instant

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
        prefetching[key]?.isClaimed = true
        return try await join(key, name: name, operation: operation)
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
        guard prefetching[key] == nil else {
            _ = try await join(key, name: name, operation: operation)
            return
        }

        let ticket = Ticket()
        prefetching[key] = ticket
        let value: Value
        do {
            value = try await join(key, name: name, operation: operation)
        } catch {
            if prefetching[key] === ticket {
                prefetching[key] = nil
            }
            throw error
        }
        // Invalidated meanwhile (or replaced by a newer prefetch): never store.
        guard prefetching[key] === ticket else { return }
        prefetching[key] = nil
        if !ticket.isClaimed {
            store(value, for: key)
        }
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

    private func join(
        _ key: Key, name: String?, operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let (call, slot) = calls.reserve(key, priority: nil, name: name, operation: operation) { call in
            await self.forget(call, key: key)
        }
        return try await call.wait(in: slot)
    }

    private func forget(_ call: InFlightCall<Value>, key: Key) {
        calls.remove(key, ifSameAs: call)
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
