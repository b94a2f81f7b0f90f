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
/// work in flight costs one dictionary look-up, whatever the number of pending operations.
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

    /// Receives the manager's events; see ``init(queue:observer:stallThreshold:)``.
    public typealias Observer = @Sendable (CoalescingEvent<String>) -> Void

    /// Creates a manager that runs its work on `queue`.
    ///
    /// The stall threshold is a development aid for work that never calls `finish(result:)`: see
    /// <doc:WhenCallersNeverHearBack>.
    ///
    /// - Parameters:
    ///   - queue: The queue to add operations to. Defaults to a new concurrent queue.
    ///   - observer: Receives every step of every piece of work, as a ``CoalescingEvent``. It is
    ///     called with no lock of the manager's held, on the thread of a call that caused an event,
    ///     or of another such call running at the same time, which delivers the events in order.
    ///     Keep it quick and hand heavy work to a queue of your own; it may call back into the
    ///     manager. Without one, nothing is recorded.
    ///   - stallThreshold: Reports work still in flight this long after it started while callers
    ///     wait for it, once, as ``CoalescingEvent/workStalled(key:callers:elapsed:)`` to the
    ///     observer, or as a line on standard error when there is none. Defaults to the
    ///     environment variable `COALESCING_STALL_THRESHOLD_SECONDS` (a number of seconds; any
    ///     other value is ignored, with a line on standard error), or none. A threshold of about
    ///     292 years or more never passes.
    public init(
        queue: OperationQueue = OperationQueue(),
        observer: Observer? = nil,
        stallThreshold: Duration? = nil
    ) {
        self.queue = queue
        let forward = observer.map { observer in
            { @Sendable (event: CoalescingEvent<OperationKey>) in observer(event.map(\.identifier)) }
        }
        engine = Engine(
            observer: forward,
            stallThreshold: stallThreshold ?? Controls.environmentStallThreshold,
            cancellation: ConcurrentOperationError.cancelled)
    }

    /// What the manager has done since it was created: work started and how it ended, callers who
    /// arrived, joined, withdrew or timed out. A snapshot, exact under concurrency.
    public var statistics: CoalescingStatistics {
        engine.statistics
    }

    // MARK: Enqueuing

    /// Enqueues `operation`, or folds it into identical work already in flight.
    ///
    /// - If an operation with the same identifier and `Value` type is pending or running, and its
    ///   result is not yet decided, `operation` joins it: it is not queued, and its completion
    ///   handler receives the shared result on its own `callBackQueue`. Its `queuePriority` and
    ///   `qualityOfService`, read now, count among the callers' priorities, which the work follows
    ///   while it waits.
    /// - Otherwise `operation` is added to ``queue``.
    /// - An operation that is not fresh (already enqueued here or in another manager, absorbed,
    ///   started, finished or cancelled) is left as it is and reported as ``CoalescingHandle/Admission/ignored``:
    ///   it is never added twice, its handler still runs exactly once, and the handle controls
    ///   nothing. One cancelled before it was ever enqueued is handed to ``queue``, which finishes
    ///   it at once without running it, so that operations depending on it do not wait forever.
    ///
    /// - Parameters:
    ///   - operation: A new operation.
    ///   - timeout: How long this caller waits at most. When it passes first, this caller alone is
    ///     withdrawn and receives `.failure(CoalescingError.timedOut)`; nil, the default, waits for
    ///     the work however long it takes, and costs nothing. Zero or less withdraws the caller at
    ///     once; about 292 years or more never passes.
    /// - Returns: A handle whose ``CoalescingHandle/cancel()`` withdraws this caller only.
    @inlinable @discardableResult  // Specialized in the caller's module: see BENCHMARKS.md.
    public func enqueue<Value>(operation: CoalescibleOperation<Value>, timeout: Duration? = nil) -> CoalescingHandle<
        Value
    > {
        let admitted = admit(operation, then: nil)
        return launched(operation, admitted, timeout: timeout)
    }

    /// Joins identical work in flight with a completion handler alone, or starts new work built by
    /// `makeOperation`.
    ///
    /// This is the cheapest way to join: no operation is created while work is in flight, so a
    /// caller costs one entry in a list. `makeOperation` is called at most once, on this thread,
    /// and only when no work with this identifier and `Value` type is in flight.
    ///
    /// ```swift
    /// manager.enqueue(identifier: "user", callBackQueue: .main, makeOperation: { UserFetchOperation(service: service) }) {
    ///     result in print(result)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - identifier: The identifier of the operations `makeOperation` builds.
    ///   - callBackQueue: Where `completionHandler` runs; nil runs it on the thread that settles
    ///     the work. Defaults to `OperationQueue.current ?? .main`.
    ///   - priority: How urgent this caller is; the work follows its most urgent caller while it
    ///     waits. Nil, the default, asks for nothing. ``CoalescingHandle/setPriority(_:)`` changes
    ///     it later.
    ///   - timeout: How long this caller waits at most; see ``enqueue(operation:timeout:)``.
    ///   - makeOperation: Builds the operation that runs the work, usually with
    ///     ``CoalescibleOperation/init(identifier:)``. It is enqueued as by
    ///     ``enqueue(operation:timeout:)``: if it has a completion handler of its own, that handler
    ///     is one more caller.
    ///   - completionHandler: Called exactly once with the shared result, or with
    ///     `.failure(ConcurrentOperationError.cancelled)` or `.failure(CoalescingError.timedOut)`.
    /// - Returns: A handle whose ``CoalescingHandle/cancel()`` withdraws this caller only.
    @inlinable @discardableResult public func enqueue<Value>(
        identifier: String,
        callBackQueue: OperationQueue? = OperationQueue.current ?? .main,
        priority: OperationPriority? = nil,
        timeout: Duration? = nil,
        makeOperation: () -> CoalescibleOperation<Value>,
        completionHandler: @escaping (Result<Value, Error>) -> Void
    ) -> CoalescingHandle<Value> {
        let caller = Caller<Value>.handler(completionHandler, queue: callBackQueue)
        let handle = arrive(identifier: identifier, caller, priority: priority, timeout: timeout, makeOperation)
        if handle.work == nil {
            caller.tell(.failure(ConcurrentOperationError.cancelled))
        }
        return handle
    }

    /// Adds an operation to ``queue``; a ``CoalescibleOperation`` is coalesced as by
    /// ``enqueue(operation:timeout:)``.
    ///
    /// An operation that is already finished or executing is ignored rather than handed to
    /// Foundation, which would stop the program. So is a ``ConcurrentOperation`` that was already
    /// enqueued by a manager. (An operation of another class that you added to some queue yourself
    /// cannot be recognised; Foundation stops the program if it is added again.)
    ///
    /// - Parameter operation: Any operation.
    public func enqueue(_ operation: Operation) {
        if let coalescible = operation as? any ManagerEnqueueable {
            coalescible.enqueue(on: self)
        } else if let concurrent = operation as? any QueueClaimable {
            if concurrent.claimForQueue() != nil {
                queue.addOperation(operation)
            }
        } else if !operation.isFinished && !operation.isExecuting {
            queue.addOperation(operation)
        }
    }

    // MARK: Awaiting

    /// Enqueues `operation` as ``enqueue(operation:timeout:)`` does, and waits for the shared result.
    ///
    /// The operation usually has no caller of its own (``CoalescibleOperation/init(identifier:)``);
    /// if it has a completion handler, that handler is called too. The result reaches this caller
    /// on whatever thread finishes the work, without a queue hop, so it never depends on a queue
    /// such as `.main` being serviced.
    ///
    /// ```swift
    /// let user = try await manager.value(of: UserFetchOperation(service: service))
    /// ```
    ///
    /// Cancelling the awaiting task withdraws this caller only (see ``CoalescingHandle/cancel()``):
    /// the others still receive the result, and the work is cancelled when every caller has left.
    ///
    /// - Parameters:
    ///   - operation: A new operation.
    ///   - timeout: How long this caller waits at most; see ``enqueue(operation:timeout:)``.
    ///   - isolation: The caller's actor, inferred; the result is returned there.
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: The work's error; `CancellationError` if the awaiting task was cancelled;
    ///   ``CoalescingError/timedOut`` if `timeout` passed first; or
    ///   ``ConcurrentOperationError/cancelled`` if the work itself was cancelled (through
    ///   ``cancel(identifier:)``, ``cancelAll()`` or the operation's `cancel()`).
    public func value<Value: Sendable>(
        of operation: CoalescibleOperation<Value>,
        timeout: Duration? = nil,
        isolation: isolated (any Actor)? = #isolation
    ) async throws -> Value {
        try Task.checkCancellation()
        let handle = launched(operation, admit(operation, then: (.task(nil, consumes: false), nil)), timeout: timeout)
        guard let work = handle.work, let slot = handle.slot else { throw ConcurrentOperationError.cancelled }
        return try await engine.wait(for: work, in: slot)
    }

    /// Joins identical work in flight, or starts new work built by `makeOperation`, and waits for
    /// the shared result. The async form of
    /// ``enqueue(identifier:callBackQueue:priority:timeout:makeOperation:completionHandler:)``: no operation is
    /// created while work is in flight.
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
    ///     ``enqueue(identifier:callBackQueue:priority:timeout:makeOperation:completionHandler:)``.
    ///   - timeout: How long this caller waits at most; see ``enqueue(operation:timeout:)``.
    ///   - isolation: The caller's actor, inferred; the result is returned there.
    ///   - makeOperation: Builds the operation that runs the work; called at most once, and only
    ///     when no identical work is in flight.
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: The work's error; `CancellationError` if the awaiting task was cancelled;
    ///   ``CoalescingError/timedOut`` if `timeout` passed first; or
    ///   ``ConcurrentOperationError/cancelled`` if the work itself was cancelled.
    public func value<Value: Sendable>(
        identifier: String,
        priority: OperationPriority? = nil,
        timeout: Duration? = nil,
        isolation: isolated (any Actor)? = #isolation,
        makeOperation: () -> CoalescibleOperation<Value>
    ) async throws -> Value {
        try Task.checkCancellation()
        let handle = arrive(
            identifier: identifier, .task(nil, consumes: false), priority: priority, timeout: timeout, makeOperation)
        guard let work = handle.work, let slot = handle.slot else { throw ConcurrentOperationError.cancelled }
        return try await engine.wait(for: work, in: slot)
    }

    // MARK: Cancelling and forgetting

    /// Cancels the work with `identifier`, of any `Value` type, for all its callers: each receives
    /// `.failure(ConcurrentOperationError.cancelled)` once. The next operation with this
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
    /// Every caller of coalesced work receives `.failure(ConcurrentOperationError.cancelled)` once.
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

    /// What admitting an operation decided under the lock.
    @usableFromInline struct Admitted<Value> {
        @usableFromInline var admission = CoalescingHandle<Value>.Admission.ignored
        /// The work the operation started or joined, here.
        @usableFromInline var work: Work<OperationKey, Value>?
        /// The caller's slot there.
        @usableFromInline var slot: Int?
        /// Whether the work must become more urgent.
        @usableFromInline var raised = false
        /// Whether the operation must be added to the queue.
        @usableFromInline var queued = false

        @inlinable init() {}
    }

    /// Admits `operation` under the lock: it joins identical work in flight, or starts new work,
    /// or (not fresh) is left alone; then `caller`, if any, waits for the work it started or
    /// joined, in place of the operation's own caller.
    @inlinable func admit<Value>(_ operation: CoalescibleOperation<Value>, then caller: (Caller<Value>, Urgency?)?)
        -> Admitted<Value>
    {
        // Read before locking: the getters are overridable, and no user code runs under our lock.
        let priority = OperationPriority(of: operation)
        let policy = operation.abandonedWorkPolicy
        let key = OperationKey(identifier: operation.identifier, valueType: Value.self)
        return engine.state.withLock { registry in
            var admitted = Admitted<Value>()
            if let work = registry.inFlight(key, as: Value.self),
                let joined = operation.ride(on: work, of: engine, in: &registry, priority: priority)
            {
                (admitted.admission, admitted.work, admitted.slot, admitted.raised) =
                    (.joinedWork, work, joined.slot, joined.raised)
            } else if let started = operation.run(
                as: key, of: engine, in: &registry, priority: priority, policy: policy)
            {
                (admitted.admission, admitted.work, admitted.slot, admitted.queued) =
                    (.startedWork, started.work, started.slot, true)
            } else if let runs = operation.claimForQueue() {
                // Not fresh, but on no queue: work of its own, or cancelled before it was enqueued.
                (admitted.admission, admitted.queued) = (runs ? .startedWork : .ignored, true)
            } else if caller != nil, let (owner, work) = operation.work, owner === engine {
                // Enqueued here before: a caller brought with it waits for the work it runs or rides.
                (admitted.admission, admitted.work) = (.joinedWork, work)
            }
            if let (caller, urgency) = caller, let work = admitted.work {
                let slot = registry.join(work, caller)
                admitted.slot = slot
                admitted.raised = (urgency.map { work.demand($0, from: slot) } ?? false) || admitted.raised
            }
            return admitted
        }
    }

    /// Joins `caller` to the work in flight for `identifier`, or to the work the operation from
    /// `makeOperation` starts or joins.
    @inlinable func arrive<Value>(
        identifier: String, _ caller: Caller<Value>, priority: OperationPriority?, timeout: Duration?,
        _ makeOperation: () -> CoalescibleOperation<Value>
    ) -> CoalescingHandle<Value> {
        let key = OperationKey(identifier: identifier, valueType: Value.self)
        let urgency = priority.map(Urgency.init)
        var joined: (work: Work<OperationKey, Value>, slot: Int, raised: Bool)?
        engine.state.withLock { registry in
            guard let work = registry.inFlight(key, as: Value.self) else { return }
            let slot = registry.join(work, caller)
            joined = (work, slot, urgency.map { work.demand($0, from: slot) } ?? false)
        }
        if let (work, slot, raised) = joined {
            var admitted = Admitted<Value>()
            (admitted.admission, admitted.work, admitted.slot, admitted.raised) = (.joinedWork, work, slot, raised)
            return launched(nil, admitted, timeout: timeout)
        }
        let operation = makeOperation()
        return launched(operation, admit(operation, then: (caller, urgency)), timeout: timeout)
    }

    /// Carries out an admission once the lock is released: queues the operation, watches the work
    /// for stalls, arms the caller's timeout and raises the work's priority.
    @inlinable func launched<Value>(
        _ operation: CoalescibleOperation<Value>?, _ admitted: Admitted<Value>, timeout: Duration?
    ) -> CoalescingHandle<Value> {
        if let operation, admitted.queued {
            queue.addOperation(operation)
        }
        guard let work = admitted.work else {
            engine.deliverEvents()
            return CoalescingHandle(admitted.admission, engine: nil, work: nil, slot: nil)
        }
        if admitted.admission == .startedWork {
            engine.watchForStall(work)
        }
        if let timeout {
            engine.withdraw(work, slot: admitted.slot, after: timeout)
        }
        if admitted.raised {
            engine.applyPriority(of: work)
        }
        engine.deliverEvents()
        return CoalescingHandle(admitted.admission, engine: engine, work: work, slot: admitted.slot)
    }

    /// How many callers wait for the work in flight for `identifier` and `valueType`; for tests.
    func callerCount<Value>(identifier: String, valueType: Value.Type) -> Int {
        engine.callerCount(for: OperationKey(identifier: identifier, valueType: valueType))
    }
}

/// The admission's two steps on the operation's side, run under the engine's lock: the operation
/// becomes a caller of work in flight, or the runner of new work.
extension CoalescibleOperation {
    /// Makes this fresh operation a caller of `work`: it will never run, and finishes when the
    /// work's result reaches it. Nil if it is not fresh.
    @inlinable final func ride(
        on work: Work<OperationKey, Value>, of engine: Engine<OperationKey>,
        in registry: inout Engine<OperationKey>.Registry, priority: OperationPriority
    ) -> (slot: Int, raised: Bool)? {
        let slot = work.callers.entries.count
        let fresh = lifecycle.withLock { lifecycle -> Caller<Value>?? in
            guard let own = lifecycle.freshCaller else { return nil }
            lifecycle = .riding(engine, work, slot: slot, own: own)
            return .some(own)
        }
        guard let own = fresh else { return nil }
        let joined = registry.join(work, .operation(self, waits: own != nil))
        return (joined, work.demand(Urgency(priority), from: joined))
    }

    /// Makes this fresh operation the runner of new work under `key`, its own caller the first to
    /// wait for it. Nil if it is not fresh.
    @inlinable final func run(
        as key: OperationKey, of engine: Engine<OperationKey>, in registry: inout Engine<OperationKey>.Registry,
        priority: OperationPriority, policy: AbandonedWorkPolicy
    ) -> (work: Work<OperationKey, Value>, slot: Int?)? {
        let work = Work<OperationKey, Value>(
            key: key, runner: .operation(self), policy: policy, floor: Urgency(priority),
            timed: registry.events != nil)
        let own = lifecycle.withLock { lifecycle -> Caller<Value>?? in
            guard let own = lifecycle.freshCaller else { return nil }
            lifecycle = .idle(.work(engine, work, slot: own == nil ? nil : 0), onQueue: true)
            return .some(own)
        }
        guard let own else { return nil }
        registry.start(work)
        guard let own else { return (work, nil) }
        return (work, registry.join(work, own))
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

/// An operation that knows how to enter an ``OperationQueueManager`` whatever its `Value` type,
/// so that `enqueue(_:)` can coalesce a ``CoalescibleOperation`` it only sees as an `Operation`.
protocol ManagerEnqueueable: Operation {
    func enqueue(on manager: OperationQueueManager)
}

extension CoalescibleOperation: ManagerEnqueueable {
    func enqueue(on manager: OperationQueueManager) {
        manager.enqueue(operation: self)
    }
}

/// An operation that a manager claims before adding it to its queue, so that it is never added
/// twice.
protocol QueueClaimable: Operation {
    func claimForQueue() -> Bool?
}

extension ConcurrentOperation: QueueClaimable {}
