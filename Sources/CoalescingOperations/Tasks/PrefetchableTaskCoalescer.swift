/// Coalesces identical concurrent async work like ``InFlightTaskCoalescer``, and can fetch a
/// result ahead of time for the one consumer that needs it next.
///
/// Start fetching early (say, during a splash screen) with
/// ``prefetch(key:priority:name:timeout:whenAbandoned:operation:)``; when the screen appears,
/// ``value(key:priority:name:timeout:whenAbandoned:progress:operation:)`` takes the result if it is
/// ready, or joins the prefetch still in flight:
///
/// ```swift
/// let feed = PrefetchableTaskCoalescer<FeedKey, Feed>(prefetchTimeout: .seconds(30))
///
/// // Splash screen: keep fetching even if the splash screen's task is cancelled.
/// Task { try await feed.prefetch(key: .explore, whenAbandoned: .runToCompletion) { try await api.exploreFeed() } }
/// // Feed screen, moments later: no second request.
/// let explore = try await feed.value(key: .explore) { try await api.exploreFeed() }
/// ```
///
/// The rules:
/// - Only a prefetch stores a result, and it stores it for one consumer: the first call to
///   `value` takes it; the next starts new work.
/// - A consumer that joins a prefetch in flight takes its result then, and nothing is stored; if
///   it withdraws first (its task cancelled or its timeout passed), the result is stored for the
///   next consumer.
/// - A prefetch that joins other work in flight makes that work a prefetch. The result is stored
///   whichever prefetchers withdraw, as long as the work ends with a value.
/// - `value` never stores its own result: coalescing is not caching.
/// - A stored result expires `prefetchTimeout` after it arrived, on the coalescer's clock: no
///   consumer takes it afterwards, and it is released then.
/// - ``cancel(key:)`` cancels the work in flight and drops the stored result; ``forget(key:)``
///   drops the stored result and lets the next caller start new work, while the callers already
///   waiting keep waiting for the old work. A prefetch cancelled or forgotten while it runs never
///   stores its result.
///
/// Cancellation, timeouts, the abandonment policy, priority, task-locals, ``statistics`` and the
/// observer work as in ``InFlightTaskCoalescer``. A consumer that takes a stored result counts as a
/// caller that joined the prefetch's work and was served; no event reports it, since that work has
/// already ended.
public final class PrefetchableTaskCoalescer<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    @usableFromInline let engine: Engine<Key>

    /// Creates a coalescer whose prefetched results expire after `prefetchTimeout`.
    ///
    /// Its time runs on `clock`, which a test can advance by hand: see <doc:TestingWithAClock>.
    ///
    /// - Parameters:
    ///   - prefetchTimeout: How long a prefetched result waits for its consumer. Match it to the
    ///     flow: seconds for a splash screen, a minute for an onboarding flow.
    ///   - observer: Receives one ``CoalescingEvent`` per step in the life of the work, as for
    ///     ``InFlightTaskCoalescer/init(observer:stallThreshold:clock:)``: on the thread that made the
    ///     change, in order, with no lock held. Keep it quick.
    ///   - stallThreshold: Reports work stalled as ``InFlightTaskCoalescer/init(observer:stallThreshold:clock:)``
    ///     describes.
    ///   - clock: The clock that timeouts, the stall threshold and `prefetchTimeout` are measured
    ///     on. The default, the continuous clock, is the wall's; a test passes a clock it advances
    ///     by hand, so that a stored result expires when the test says.
    public init<C: Clock>(
        prefetchTimeout: Duration, observer: (@Sendable (CoalescingEvent<Key>) -> Void)? = nil,
        stallThreshold: Duration? = nil, clock: C = ContinuousClock()
    ) where C.Duration == Duration {
        engine = Engine(
            observer: observer, stallThreshold: stallThreshold ?? Controls.environmentStallThreshold,
            prefetchTimeout: prefetchTimeout, clock: EngineClock(clock))
    }

    /// Returns the prefetched result for `key` if one is waiting, or the result of the work in
    /// flight for `key`, starting `operation` if there is none.
    ///
    /// Takes a prefetched result (the next call will not find it), and never stores its own.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work.
    ///   - priority: The priority of the task that runs `operation`, if this call starts it.
    ///     Defaults to the caller's.
    ///   - name: A name for that task, shown by debuggers (Swift 6.2 and later).
    ///   - timeout: How long this caller waits at most; nil waits for the outcome. When it
    ///     passes, this caller alone withdraws and throws ``CoalescingError/timedOut``. Zero or
    ///     negative passes at once; longer than anything schedulable (about 292 years), never.
    ///   - whenAbandoned: What happens to the work if every caller withdraws, when this call
    ///     starts it. Ignored when this caller joins work in flight.
    ///   - progress: Receives the work's progress, as for ``InFlightTaskCoalescer``'s
    ///     ``InFlightTaskCoalescer/value(key:priority:name:timeout:whenAbandoned:progress:operation:)``.
    ///   - operation: The work, run in a detached task of its own if this call starts it.
    /// - Returns: The value, the same for every caller of the same work.
    /// - Throws: The work's error; `CancellationError` if this caller's task was cancelled;
    ///   ``CoalescingError/cancelled`` if the work was cancelled for everyone, through
    ///   ``cancel(key:)`` or ``cancelAll()`` (Guarantee 13); or ``CoalescingError/timedOut`` if
    ///   `timeout` passed first.
    @inlinable public func value(
        key: Key,
        priority: TaskPriority? = nil,
        name: String? = nil,
        timeout: Duration? = nil,
        whenAbandoned: AbandonedWorkPolicy = .cancel,
        progress: (@Sendable (WorkProgress) -> Void)? = nil,
        operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        try Task.checkCancellation()
        let arrivedAt = Task.currentPriority
        let arrival = engine.arrive(
            key: key, as: .consumer, at: arrivedAt, priority: priority, name: name, timeout: timeout,
            whenAbandoned: whenAbandoned, progress: progress, operation: operation)
        switch arrival {
        case .joins(let entry), .starts(let entry):
            return try await engine.wait(for: entry.work, in: entry.slot!, arrivedAt: arrivedAt)
        case .taken(let value):
            // The work's end is reported before its callers hear (Guarantee 22), a consumer that
            // takes its stored value too, even while another thread delivers the events.
            await engine.afterRecordedEvents()
            return value
        case .alreadyStored: preconditionFailure("PrefetchableTaskCoalescer: a consumer was told to do nothing")
        }
    }

    /// Fetches the result for `key` ahead of time and keeps it for the next consumer.
    ///
    /// Does nothing if a fresh result is already waiting; joins the work already in flight for
    /// `key`, if any, which then stores its result when it ends. Returns once the result is
    /// stored, so that a consumer called afterwards finds it.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work.
    ///   - priority: The priority of the task that runs `operation`, if this call starts it.
    ///     Defaults to the caller's.
    ///   - name: A name for that task, shown by debuggers (Swift 6.2 and later).
    ///   - timeout: How long this caller waits at most; nil waits for the outcome. When it
    ///     passes, this caller alone withdraws and throws ``CoalescingError/timedOut``. Zero or
    ///     negative passes at once; longer than anything schedulable (about 292 years), never; the work,
    ///     if others still wait or it runs to completion, still stores its result.
    ///   - whenAbandoned: What happens to the work if every caller withdraws, when this call
    ///     starts it. ``AbandonedWorkPolicy/runToCompletion`` keeps prefetching, and stores the
    ///     result, even when every prefetcher's task is cancelled.
    ///   - operation: The work, run in a detached task of its own if this call starts it.
    /// - Throws: The work's error; `CancellationError` if this caller's task was cancelled;
    ///   ``CoalescingError/cancelled`` if the work was cancelled for everyone, through
    ///   ``cancel(key:)`` or ``cancelAll()`` (Guarantee 13); or ``CoalescingError/timedOut`` if
    ///   `timeout` passed first.
    @inlinable public func prefetch(
        key: Key,
        priority: TaskPriority? = nil,
        name: String? = nil,
        timeout: Duration? = nil,
        whenAbandoned: AbandonedWorkPolicy = .cancel,
        operation: @escaping @Sendable () async throws -> Value
    ) async throws {
        try Task.checkCancellation()
        let arrivedAt = Task.currentPriority
        let arrival = engine.arrive(
            key: key, as: .prefetcher, at: arrivedAt, priority: priority, name: name, timeout: timeout,
            whenAbandoned: whenAbandoned, operation: operation)
        switch arrival {
        case .joins(let entry), .starts(let entry):
            do {
                _ = try await engine.wait(for: entry.work, in: entry.slot!, arrivedAt: arrivedAt)
            } catch is StoredForAConsumer {
                // Stored: the value is the consumer's, and this prefetcher's job is done.
            }
        case .alreadyStored: return
        case .taken: preconditionFailure("PrefetchableTaskCoalescer: a prefetcher took a stored result")
        }
    }

    /// Cancels the work in flight for `key`, prefetch or not, and drops the result stored for it:
    /// the callers throw ``CoalescingError/cancelled`` at once, and the next caller of `key`
    /// starts new work. Use it before a refresh.
    ///
    /// - Parameter key: The key to cancel.
    /// - Returns: Whether work was in flight or a result stored for `key`.
    @discardableResult public func cancel(key: Key) -> Bool {
        engine.cancelAll(where: { $0 == key }, includingForgotten: false)
    }

    /// Cancels all work in flight, forgotten work included, and drops every stored result, for
    /// example when the user logs out.
    ///
    /// - Returns: Whether any work was in flight or any result stored.
    @discardableResult public func cancelAll() -> Bool {
        engine.cancelAll(where: { _ in true }, includingForgotten: true)
    }

    /// Forgets `key`: drops the result stored for it, and the work in flight for it from the
    /// index, so that the next caller of `key` starts new work. The callers already waiting keep
    /// waiting for the old work and receive its result; nothing is cancelled. A prefetch
    /// forgotten while it runs does not store its result, and the old work ending later never
    /// removes the new work.
    ///
    /// - Parameter key: The key to forget.
    /// - Returns: Whether work was in flight or a result stored for `key`.
    @discardableResult public func forget(key: Key) -> Bool { engine.forget(where: { $0 == key }) }

    /// What the coalescer has done since it was created: a snapshot, exact under concurrency.
    public var statistics: CoalescingStatistics { engine.statistics }
}
