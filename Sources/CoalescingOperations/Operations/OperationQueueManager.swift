import Foundation

/// Runs operations on an `OperationQueue`, coalescing identical ``CoalescibleOperation``s as they
/// are enqueued.
///
/// While work with a given identifier and `Value` type is pending or running, every further
/// caller with the same identifier and `Value` type joins it instead of starting its own: the work
/// runs once and every caller receives the result, each on its own callback queue. Once the work
/// has ended (or was cancelled), the next caller starts new work: coalescing is not caching.
///
/// ```swift
/// let manager = OperationQueueManager()
/// manager.enqueue(operation: UserFetchOperation(service: service) { result in print("tab bar", result) })
/// manager.enqueue(operation: UserFetchOperation(service: service) { result in print("header", result) })
/// ```
///
/// Share one manager between every part of the app that should coalesce with the others. Finding
/// work in flight costs one hash-table look-up, whatever the number of pending operations.
///
/// All methods are safe to call from any thread, including from completion handlers. Work in
/// flight keeps what it needs to finish (the index, the statistics and the observer), not the
/// manager object: a manager released while its work runs still serves every caller.
public final class OperationQueueManager: Sendable {
    /// The queue the work runs on.
    ///
    /// Use it to tune concurrency (`maxConcurrentOperationCount`) or to wait for the work
    /// (`waitUntilAllOperationsAreFinished()`). Operations added to it directly are not coalesced.
    public let queue: OperationQueue

    /// The index, the callers, the controls, the statistics and the events: everything but the
    /// queue. See ``Engine``.
    @usableFromInline let engine: Engine<OperationKey>

    /// Receives the manager's events; see ``init(queue:observer:stallThreshold:clock:)``.
    public typealias Observer = @Sendable (CoalescingEvent<String>) -> Void

    /// Creates a manager that runs its work on `queue`.
    ///
    /// The stall threshold is a development aid for work that never calls `finish(result:)`: see
    /// <doc:WhenCallersNeverHearBack>.
    ///
    /// Its time runs on `clock`, which a test can advance by hand: see <doc:TestingWithAClock>.
    ///
    /// - Parameters:
    ///   - queue: The queue to add operations to. Defaults to a new concurrent queue.
    ///   - observer: Receives every step of every piece of work, as a ``CoalescingEvent``. It is
    ///     called with no lock of the manager's held, on the thread of a call that caused an event,
    ///     or of another such call running at the same time, which delivers the events in order.
    ///     Keep it quick and hand heavy work to a queue of your own; it may call back into the
    ///     manager. Without one, nothing is recorded.
    ///   - stallThreshold: Reports work still in flight this long after it started while callers
    ///     wait for it, once, as ``CoalescingEvent/workStalled(key:work:callers:elapsed:)`` to the
    ///     observer, or as a line on standard error when there is none. Defaults to the
    ///     environment variable `COALESCING_STALL_THRESHOLD_SECONDS` (a number of seconds; any
    ///     other value is ignored, with a line on standard error), or none. A threshold of about
    ///     292 years or more never passes.
    ///   - clock: The clock that callers' timeouts and the stall threshold are measured on. The
    ///     default, the continuous clock, is the wall's; a test passes a clock it advances by hand,
    ///     so that a 30-second timeout passes in no time.
    public init<C: Clock>(
        queue: OperationQueue = OperationQueue(), observer: Observer? = nil, stallThreshold: Duration? = nil,
        clock: C = ContinuousClock()
    ) where C.Duration == Duration {
        self.queue = queue
        let forward = observer.map { observer in
            { @Sendable (event: CoalescingEvent<OperationKey>) in observer(event.map(\.identifier)) }
        }
        engine = Engine(
            observer: forward, stallThreshold: stallThreshold ?? Controls.environmentStallThreshold,
            clock: EngineClock(clock))
    }

    /// What the manager has done since it was created: work started and how it ended, callers who
    /// arrived, joined, withdrew or timed out. A snapshot, exact under concurrency.
    public var statistics: CoalescingStatistics { engine.statistics }

    // MARK: Enqueuing

    /// Enqueues `operation`, or makes it a caller of identical work already in flight.
    ///
    /// - If an operation with the same identifier and `Value` type is pending or running, and its
    ///   result is not yet decided, `operation` joins it: it is not queued, and its completion
    ///   handler receives the shared result on its own `callBackQueue`. Its `queuePriority` and
    ///   `qualityOfService`, read now, count among the callers' priorities, which the work follows
    ///   while it waits.
    /// - Otherwise `operation` is added to ``queue``.
    /// - An operation that is not fresh (already enqueued here or in another manager, joined to
    ///   other work, started, finished or cancelled) is left as it is and reported as
    ///   ``CoalescingHandle/Admission/ignored``: it is never added twice, its handler still runs
    ///   exactly once, and the handle controls nothing. One cancelled before it was ever enqueued
    ///   is handed to ``queue``, which finishes it at once without running it, so that operations
    ///   depending on it do not wait forever.
    ///
    /// - Parameters:
    ///   - operation: A new operation.
    ///   - timeout: How long this caller waits at most. When it passes first, this caller alone is
    ///     withdrawn and receives `.failure(CoalescingError.timedOut)`; nil, the default, waits for
    ///     the work however long it takes, and costs nothing. Zero or less withdraws the caller at
    ///     once; about 292 years or more never passes.
    ///   - progress: Receives the work's progress for the operation's own caller, on its
    ///     `callBackQueue`: the latest value at once if the work has reported any, then what
    ///     follows, the latest winning when updates come faster, always before the result
    ///     (Guarantees 24 to 27). Nil, the default, costs nothing.
    /// - Returns: A handle whose ``CoalescingHandle/withdraw()`` withdraws this caller only.
    @inlinable @discardableResult  // Specialized in the caller's module: see BENCHMARKS.md.
    public func enqueue<Value>(
        operation: CoalescibleOperation<Value>, timeout: Duration? = nil,
        progress: (@Sendable (WorkProgress) -> Void)? = nil
    ) -> CoalescingHandle<Value> {
        let sink = progress.map { ProgressSink(queue: operation.callBackQueue, onProgress: $0) }
        let admission = engine.admit(operation, watching: sink, then: nil)
        launch(operation, admission, timeout: timeout, sink: sink)
        return CoalescingHandle(admission, of: engine)
    }

    /// Joins identical work in flight with a completion handler alone, or starts new work built by
    /// `makeOperation`.
    ///
    /// This is the cheapest way to join: no operation is created while work is in flight, so a
    /// caller costs one entry in a list. `makeOperation` is called at most once, on this thread,
    /// and only when no work with this identifier and `Value` type is in flight.
    ///
    /// ```swift
    /// manager.enqueue(identifier: "user", makeOperation: { UserFetchOperation(service: service) }) { result in
    ///     print(result)
    /// }
    /// ```
    ///
    /// The handler is `@Sendable`: the library calls it on another thread, so the compiler checks
    /// what it captures. Code on the main actor uses
    /// ``enqueue(identifier:priority:timeout:makeOperation:progress:onMainActor:)`` instead.
    ///
    /// - Parameters:
    ///   - identifier: The identifier of the operations `makeOperation` builds.
    ///   - callBackQueue: Where `completionHandler` runs; nil, the default, runs it on the thread
    ///     that finishes the work, with no queue hop.
    ///   - priority: How urgent this caller is; the work follows its most urgent caller while it
    ///     waits. Nil, the default, asks for nothing. ``CoalescingHandle/setPriority(_:)`` changes
    ///     it later.
    ///   - timeout: How long this caller waits at most; see ``enqueue(operation:timeout:progress:)``.
    ///   - makeOperation: Builds the operation that runs the work, usually with
    ///     ``CoalescibleOperation/init(identifier:callBackQueue:completionHandler:)`` and no handler.
    ///     It is enqueued as by ``enqueue(operation:timeout:progress:)``: if it has a completion handler of
    ///     its own, that handler is one more caller.
    ///   - progress: Receives the work's progress on `callBackQueue`; see
    ///     ``enqueue(operation:timeout:progress:)``.
    ///   - completionHandler: Called exactly once with the shared result, or with a failure: see
    ///     ``CoalescingError``.
    /// - Returns: A handle whose ``CoalescingHandle/withdraw()`` withdraws this caller only.
    @inlinable @discardableResult public func enqueue<Value>(
        identifier: String,
        callBackQueue: OperationQueue? = nil,
        priority: OperationPriority? = nil,
        timeout: Duration? = nil,
        makeOperation: () -> CoalescibleOperation<Value>,
        progress: (@Sendable (WorkProgress) -> Void)? = nil,
        completionHandler: @escaping @Sendable (Result<Value, Error>) -> Void
    ) -> CoalescingHandle<Value> {
        let admission = arrive(
            identifier, .handler(completionHandler, queue: callBackQueue), priority.map(Urgency.init),
            progress.map { ProgressSink(queue: callBackQueue, onProgress: $0) }, timeout, makeOperation)
        return CoalescingHandle(admission, of: engine)
    }

    /// Joins identical work in flight, or starts new work built by `makeOperation`, and calls
    /// `completionHandler` on the main actor: the form for view models and view controllers.
    ///
    /// ```swift
    /// @MainActor final class ProfileViewModel {
    ///     var profile: Profile?
    ///
    ///     func load() {
    ///         manager.enqueue(identifier: "profile") { ProfileFetchOperation(api: api) } onMainActor: { result in
    ///             self.profile = try? result.get()
    ///         }
    ///     }
    /// }
    /// ```
    ///
    /// The handler is isolated to the main actor, so the compiler lets it touch main-actor state
    /// and checks everything else it captures. The result is handed to the main actor as a job of
    /// its own, which runs once the main actor is free: in an app, at the next turn of the main
    /// run loop (see <doc:CallbackQueues> for command-line programs).
    ///
    /// - Parameters:
    ///   - identifier: The identifier of the operations `makeOperation` builds.
    ///   - priority: How urgent this caller is; see
    ///     ``enqueue(identifier:callBackQueue:priority:timeout:makeOperation:progress:completionHandler:)``.
    ///   - timeout: How long this caller waits at most; see ``enqueue(operation:timeout:progress:)``.
    ///   - makeOperation: Builds the operation that runs the work; called at most once, and only
    ///     when no identical work is in flight.
    ///   - progress: Receives the work's progress on the main actor, before the result; see
    ///     ``enqueue(operation:timeout:progress:)``.
    ///   - completionHandler: Called exactly once, on the main actor, with the shared result or a
    ///     failure: see ``CoalescingError``.
    /// - Returns: A handle whose ``CoalescingHandle/withdraw()`` withdraws this caller only.
    @inlinable @discardableResult public func enqueue<Value>(
        identifier: String,
        priority: OperationPriority? = nil,
        timeout: Duration? = nil,
        makeOperation: () -> CoalescibleOperation<Value>,
        progress: (@MainActor (WorkProgress) -> Void)? = nil,
        onMainActor completionHandler: @escaping @MainActor (Result<Value, Error>) -> Void
    ) -> CoalescingHandle<Value> {
        // Through the runtime rather than `OperationQueue.main`: on Linux that queue may run its
        // operations off the main thread, where the main actor could not be assumed. Progress is
        // delivered on the main actor (the watcher's delivery runs there), and this caller's result
        // is enqueued there after its last progress.
        let handler: @Sendable (Result<Value, Error>) -> Void = { result in
            _ = Task { @MainActor in completionHandler(result) }
        }
        let sink = progress.map { progress in
            ProgressSink(queue: nil, onMainActor: true) { value in MainActor.assumeIsolated { progress(value) } }
        }
        let admission = arrive(
            identifier, .handler(handler, queue: nil), priority.map(Urgency.init), sink, timeout, makeOperation)
        return CoalescingHandle(admission, of: engine)
    }

    // MARK: Awaiting

    /// Enqueues `operation` as ``enqueue(operation:timeout:progress:)`` does, and waits for the shared result.
    ///
    /// The operation usually has no caller of its own; if it has a completion handler, that
    /// handler is called too. The result reaches this caller on whatever thread finishes the
    /// work, without a queue hop, and is returned on the caller's actor.
    ///
    /// ```swift
    /// let user = try await manager.value(of: UserFetchOperation(service: service))
    /// ```
    ///
    /// Cancelling the awaiting task withdraws this caller only: the others still receive the
    /// result, and the work is cancelled when every caller has left.
    ///
    /// - Parameters:
    ///   - operation: A new operation.
    ///   - timeout: How long this caller waits at most; see ``enqueue(operation:timeout:progress:)``.
    ///   - progress: Receives the work's progress on the thread that reports it, always before
    ///     this call returns; see ``enqueue(operation:timeout:progress:)``.
    ///   - isolation: The caller's actor, inferred; the result is returned there.
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: The work's error; `CancellationError` if the awaiting task was cancelled;
    ///   ``CoalescingError/timedOut`` if `timeout` passed first; or ``CoalescingError/cancelled``
    ///   if the work itself was cancelled (through ``cancel(identifier:)``, ``cancelAll()`` or the
    ///   operation's `cancel()`).
    public func value<Value>(
        of operation: CoalescibleOperation<Value>,
        timeout: Duration? = nil,
        progress: (@Sendable (WorkProgress) -> Void)? = nil,
        isolation: isolated (any Actor)? = #isolation
    ) async throws -> Value {
        try Task.checkCancellation()
        // Read before arriving: an escalation between arriving and waiting is then not missed.
        let arrivedAt = Task.currentPriority
        // The task's own priority counts, as the matching quality of service (Guarantee 19).
        let newcomer = Newcomer<Value>(
            .arriving(consumes: false), urgency: Urgency(serviceOf: arrivedAt),
            sink: progress.map { ProgressSink(queue: nil, onProgress: $0) }, ownsOperation: true)
        let admission = engine.admit(operation, then: newcomer)
        launch(operation, admission, timeout: timeout, sink: newcomer.sink)
        let entry = try entry(waitingAfter: admission)
        // A task always has a slot: only an operation starts work with no caller.
        return try await engine.wait(for: entry.work, in: entry.slot!, arrivedAt: arrivedAt)
    }

    /// Joins identical work in flight, or starts new work built by `makeOperation`, and waits for
    /// the shared result: the async form of
    /// ``enqueue(identifier:callBackQueue:priority:timeout:makeOperation:progress:completionHandler:)``.
    /// No operation is created while work is in flight.
    ///
    /// ```swift
    /// let user = try await manager.value(identifier: "user", priority: OperationPriority(queuePriority: .high)) {
    ///     UserFetchOperation(service: service)
    /// }
    /// ```
    ///
    /// Cancelling the awaiting task withdraws this caller only.
    ///
    /// - Parameters:
    ///   - identifier: The identifier of the operations `makeOperation` builds.
    ///   - priority: How urgent this caller is; see
    ///     ``enqueue(identifier:callBackQueue:priority:timeout:makeOperation:progress:completionHandler:)``.
    ///   - timeout: How long this caller waits at most; see ``enqueue(operation:timeout:progress:)``.
    ///   - progress: Receives the work's progress; see ``value(of:timeout:progress:isolation:)``.
    ///   - isolation: The caller's actor, inferred; the result is returned there.
    ///   - makeOperation: Builds the operation that runs the work; called at most once, and only
    ///     when no identical work is in flight.
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: As ``value(of:timeout:progress:isolation:)``.
    public func value<Value>(
        identifier: String,
        priority: OperationPriority? = nil,
        timeout: Duration? = nil,
        progress: (@Sendable (WorkProgress) -> Void)? = nil,
        isolation: isolated (any Actor)? = #isolation,
        makeOperation: () -> CoalescibleOperation<Value>
    ) async throws -> Value {
        try Task.checkCancellation()
        // Read before arriving: an escalation between arriving and waiting is then not missed.
        let arrivedAt = Task.currentPriority
        // The task's own priority counts, as the matching quality of service, beside what it asks
        // for (Guarantee 19).
        var urgency = Urgency(serviceOf: arrivedAt)
        if let priority { urgency = urgency.raised(to: Urgency(priority)) }
        let admission = arrive(
            identifier, Caller<Value>.arriving(consumes: false), urgency,
            progress.map { ProgressSink(queue: nil, onProgress: $0) }, timeout, makeOperation)
        let entry = try entry(waitingAfter: admission)
        return try await engine.wait(for: entry.work, in: entry.slot!, arrivedAt: arrivedAt)
    }

    // MARK: Cancelling and forgetting

    /// Cancels the work with `identifier`, of any `Value` type, for all its callers: each receives
    /// `.failure(CoalescingError.cancelled)` once. The next operation with this
    /// identifier starts new work.
    ///
    /// - Parameter identifier: The identifier of the work to cancel.
    /// - Returns: Whether any such work was in flight.
    @discardableResult public func cancel(identifier: String) -> Bool {
        engine.cancelAll(where: { $0.identifier == identifier }, includingForgotten: false)
    }

    /// Cancels everything on ``queue``, coalesced or not, forgotten work included, for example
    /// when the user logs out.
    ///
    /// Every caller of coalesced work receives `.failure(CoalescingError.cancelled)` once.
    /// Other operations are cancelled through `queue.cancelAllOperations()`, which does nothing for
    /// `OperationQueue.main` on Linux.
    public func cancelAll() {
        _ = engine.cancelAll(where: { _ in true }, includingForgotten: true)
        queue.cancelAllOperations()
    }

    /// Forgets the work in flight with `identifier`, of any `Value` type, without cancelling it:
    /// the next caller starts new work, while the callers already waiting keep waiting for the old
    /// work and receive its result.
    ///
    /// Use it for read-after-write: after saving a profile, the next profile fetch must not join a
    /// fetch that started before the save. When the forgotten work ends, it leaves the new work's
    /// entry alone.
    ///
    /// - Parameter identifier: The identifier of the work to forget.
    /// - Returns: Whether any such work was in flight.
    @discardableResult public func forget(identifier: String) -> Bool {
        engine.forget(where: { $0.identifier == identifier })
    }

    // MARK: The one way in

    /// A caller that arrives by itself, or beside an operation in place of the operation's own:
    /// a handler or a task, how urgent it is, and where its progress goes if it asked for it.
    @usableFromInline struct Newcomer<Value: Sendable> {
        @usableFromInline let caller: Caller<Value>
        @usableFromInline let urgency: Urgency?
        @usableFromInline let sink: ProgressSink?
        /// Whether the operation is the newcomer's own (`value(of:)`), whose priority it brings
        /// along, rather than one built for it.
        @usableFromInline let ownsOperation: Bool

        @inlinable init(
            _ caller: Caller<Value>, urgency: Urgency? = nil, sink: ProgressSink? = nil, ownsOperation: Bool = false
        ) {
            self.caller = caller
            self.urgency = urgency
            self.sink = sink
            self.ownsOperation = ownsOperation
        }

        /// What it asks for beside an operation that joins other work, now or before (beside one
        /// that runs the work, it asks for its own urgency only): its own urgency, raised to the
        /// operation's when the operation is its own; the operation's when it asks for none
        /// (Guarantee 19).
        @inlinable func asking(beside operation: Urgency) -> Urgency {
            guard let urgency else { return operation }
            return ownsOperation ? urgency.raised(to: operation) : urgency
        }
    }

    /// Joins `caller` to the work in flight for `identifier`, or to the work the operation from
    /// `makeOperation` starts or joins, and carries the admission out; a handler the admission
    /// turns away hears that its work was cancelled. Takes the caller's parts, not a ``Newcomer``:
    /// one made on the joining path was destroyed through its generic value witnesses, ~60
    /// instructions a join.
    @inlinable @inline(__always) func arrive<Value>(
        _ identifier: String, _ caller: Caller<Value>, _ urgency: Urgency?, _ sink: ProgressSink?,
        _ timeout: Duration?, _ makeOperation: () -> CoalescibleOperation<Value>
    ) -> Admitted<OperationKey, Value> {
        let key = OperationKey(identifier: identifier, valueType: Value.self)
        if let joined = engine.join(key, caller, asking: urgency, watching: sink) {
            engine.follow(joined, timeout: timeout, sink: sink)
            return .joins(joined)
        }
        let operation = makeOperation()
        let admission = engine.admit(operation, then: Newcomer(caller, urgency: urgency, sink: sink))
        launch(operation, admission, timeout: timeout, sink: sink)
        if case .turnsAway = admission { caller.tell(.failure(CoalescingError.cancelled)) }
        return admission
    }

    /// Carries out an admission once the lock is released: queues the operation, then what
    /// follows every arrival (``Engine/follow(_:timeout:sink:)``).
    @inlinable func launch<Value>(
        _ operation: CoalescibleOperation<Value>, _ admission: Admitted<OperationKey, Value>, timeout: Duration?,
        sink: ProgressSink?
    ) {
        switch admission {
        case .starts(let entry):
            queue.addOperation(operation)
            engine.follow(entry, timeout: timeout, sink: sink)
        case .joins(let entry):
            engine.follow(entry, timeout: timeout, sink: sink)
        case .turnsAway(let enqueues, _):
            if enqueues { queue.addOperation(operation) }
            engine.deliverEvents()
        }
    }

    /// Where an awaiting task waits: the entry it was admitted to; turned away, it throws as if its
    /// work was cancelled.
    @inlinable func entry<Value>(waitingAfter admission: Admitted<OperationKey, Value>) throws
        -> Entry<OperationKey, Value>
    {
        switch admission {
        case .starts(let entry), .joins(let entry): return entry
        case .turnsAway: throw CoalescingError.cancelled
        }
    }
}

/// What makes two coalescible operations the same work: their identifier and their `Value` type.
@usableFromInline struct OperationKey: Hashable, Sendable, CustomStringConvertible {
    @usableFromInline let identifier: String
    @usableFromInline let valueType: ObjectIdentifier

    @inlinable init<Value>(identifier: String, valueType: Value.Type) {
        self.identifier = identifier
        self.valueType = ObjectIdentifier(valueType)
    }

    @usableFromInline var description: String { identifier }
}
