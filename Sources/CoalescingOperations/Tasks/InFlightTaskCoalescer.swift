/// Runs identical concurrent async work once and hands its result to every caller.
///
/// While work for a key is in flight, every further caller with that key joins it instead of
/// starting its own; once the work ends, the next caller starts new work (coalescing is not
/// caching):
///
/// ```swift
/// let profiles = InFlightTaskCoalescer<String, Profile>()
///
/// func profile(id: String) async throws -> Profile {
///     try await profiles.value(key: id, name: "profile \(id)", timeout: .seconds(5)) {
///         try await api.fetchProfile(id: id)
///     }
/// }
///
/// func save(_ profile: Profile) async throws {
///     try await api.save(profile)
///     profiles.forget(key: profile.id)  // the next read must not join one started before the write
/// }
/// ```
///
/// - A caller is registered before anything is awaited, so concurrent callers always find it.
/// - A caller whose own task is cancelled throws `CancellationError` at once, and one whose
///   `timeout` passes throws ``CoalescingError/timedOut``; the work goes on for the others. When
///   the last caller has withdrawn, the work is cancelled, or runs to its end if the caller that
///   started it passed `whenAbandoned: .runToCompletion`.
/// - Work that throws hands its error to every caller, and frees the key.
/// - ``cancel(key:)`` stops the work for all its callers; ``forget(key:)`` lets the next caller
///   start new work while the callers already waiting keep waiting for the old one.
/// - The work runs in a detached task: it inherits none of the starting caller's task-local values
///   (a request ID or a trace span would otherwise become the context of everyone's work). It
///   keeps the starting caller's priority, and a more urgent caller who joins raises it (on Swift
///   6.2 runtimes and later). Task priorities can only rise: a caller withdrawing never lowers it.
/// - Waiting costs no thread: callers suspend on continuations. Joining takes a lock on the
///   caller's own thread, with no hop onto an actor.
/// - ``statistics`` counts what the coalescer did, and the observer given to ``init(observer:stallThreshold:clock:)``
///   sees every step as a ``CoalescingEvent``.
public final class InFlightTaskCoalescer<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    @usableFromInline let engine: Engine<Key>

    /// Creates a coalescer with nothing in flight.
    ///
    /// Its time runs on `clock`, which a test can advance by hand: see <doc:TestingWithAClock>.
    ///
    /// - Parameters:
    ///   - observer: Receives one ``CoalescingEvent`` per step in the life of the work: started,
    ///     caller joined, caller withdrawn, priority changed, ended, stalled. It runs on the thread
    ///     that made the change (a caller's, the work's task, a timer's, or the one that
    ///     cancelled), one event at a time and in order, with no lock of the coalescer held: it
    ///     may call back into the coalescer. Keep it quick, since it delays the caller it runs on.
    ///     The coalescer holds it until the coalescer and its work in flight are gone.
    ///   - stallThreshold: Reports work still in flight this long after it started while callers
    ///     wait for it, once, as ``CoalescingEvent/workStalled(key:work:callers:elapsed:)`` to the
    ///     observer, or as a line on standard error when there is none. Defaults to the
    ///     environment variable `COALESCING_STALL_THRESHOLD_SECONDS`, or none.
    ///   - clock: The clock that callers' timeouts and the stall threshold are measured on. The
    ///     default, the continuous clock, is the wall's; a test passes a clock it advances by hand.
    public init<C: Clock>(
        observer: (@Sendable (CoalescingEvent<Key>) -> Void)? = nil, stallThreshold: Duration? = nil,
        clock: C = ContinuousClock()
    ) where C.Duration == Duration {
        engine = Engine(
            observer: observer, stallThreshold: stallThreshold ?? Controls.environmentStallThreshold,
            clock: EngineClock(clock))
    }

    /// Returns the result of the work in flight for `key`, starting `operation` if there is none.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work. Include everything that makes them differ.
    ///   - priority: The priority of the task that runs `operation`, if this call starts it.
    ///     Defaults to the caller's.
    ///   - name: A name for that task, shown by debuggers (Swift 6.2 and later).
    ///   - timeout: How long this caller waits at most; nil waits for the outcome. When it
    ///     passes, this caller alone withdraws and throws ``CoalescingError/timedOut``. Zero or
    ///     negative passes at once; longer than anything schedulable (about 292 years), never.
    ///   - whenAbandoned: What happens to the work if every caller withdraws, when this call
    ///     starts it: ``AbandonedWorkPolicy/cancel`` (the default) or
    ///     ``AbandonedWorkPolicy/runToCompletion``, for a write or an upload that must finish.
    ///     Ignored when this caller joins work in flight.
    ///   - progress: Receives the work's progress, on the thread that reports it: the latest value
    ///     at once if the work has reported any, then what follows, the latest winning when updates
    ///     come faster, always before this call returns (Guarantees 24 to 27). The work reports
    ///     through ``ProgressReporter/current``. Nil, the default, costs nothing.
    ///   - operation: The work. Runs in a detached task of its own, so it outlives any one caller
    ///     and sees none of its task-local values; it sees `Task.isCancelled` when it was
    ///     cancelled or abandoned.
    /// - Returns: The work's value, the same for every caller.
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
            key: key, as: .plain, at: arrivedAt, priority: priority, name: name, timeout: timeout,
            whenAbandoned: whenAbandoned, progress: progress, operation: operation)
        switch arrival {
        case .joins(let entry), .starts(let entry):
            return try await engine.wait(for: entry.work, in: entry.slot!, arrivedAt: arrivedAt)
        case .taken, .alreadyStored:
            preconditionFailure("InFlightTaskCoalescer: a plain caller found a prefetched result")
        }
    }

    /// Cancels the work in flight for `key`: its callers throw ``CoalescingError/cancelled`` at
    /// once (not `CancellationError`, which says that a caller's own task was cancelled), and the
    /// next caller of `key` starts new work.
    ///
    /// Work that was forgotten is no longer under its key; ``cancelAll()`` still reaches it.
    ///
    /// - Parameter key: The key of the work to cancel.
    /// - Returns: Whether work was in flight for `key`.
    @discardableResult public func cancel(key: Key) -> Bool {
        engine.cancelAll(where: { $0 == key }, includingForgotten: false)
    }

    /// Cancels all work in flight, forgotten work included, for example when the user logs out.
    ///
    /// - Returns: Whether any work was in flight.
    @discardableResult public func cancelAll() -> Bool {
        engine.cancelAll(where: { _ in true }, includingForgotten: true)
    }

    /// Forgets the work in flight for `key`: the next caller of `key` starts new work, while the
    /// callers already waiting keep waiting for the old work and receive its result. Nothing is
    /// cancelled, and the old work ending later never removes the new work.
    ///
    /// Use it after a write, so that the next read does not join one that started before it.
    ///
    /// - Parameter key: The key of the work to forget.
    /// - Returns: Whether work was in flight for `key`.
    @discardableResult public func forget(key: Key) -> Bool { engine.forget(where: { $0 == key }) }

    /// What the coalescer has done since it was created: a snapshot, exact under concurrency.
    public var statistics: CoalescingStatistics { engine.statistics }
}
