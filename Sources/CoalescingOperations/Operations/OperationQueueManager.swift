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
/// flight keeps its manager alive until its result is decided.
public final class OperationQueueManager: @unchecked Sendable {
    // @unchecked: `queue` is thread-safe itself; `index` is guarded by its lock; the rest is `let`.

    /// The queue the work runs on.
    ///
    /// Use it to tune concurrency (`maxConcurrentOperationCount`) or to wait for the work
    /// (`waitUntilAllOperationsAreFinished()`). Operations added to it directly are not coalesced.
    public let queue: OperationQueue

    @usableFromInline let index = LockedState(Index())
    /// The observer given at creation, fed in the order of the changes; nil costs nothing.
    @usableFromInline let events: EventChannel<String>?
    /// How long work may stay in flight with callers waiting before it is reported as stalled.
    @usableFromInline let stallThreshold: Duration?

    /// The work in flight, by identifier and `Value` type, and what the manager has done so far.
    @usableFromInline
    struct Index {
        /// An entry leaves when its work's result is decided, and only if it still holds that same
        /// operation; ``OperationQueueManager/forget(identifier:)`` removes it earlier.
        @usableFromInline var inFlight: [OperationKey: Operation] = [:]
        @usableFromInline var statistics = CoalescingStatistics()

        @usableFromInline init() {}
    }

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
    ///     observer, or as a line on standard error when there is none. Zero or negative checks at
    ///     once; a threshold longer than anything schedulable (about 292 years) never reports.
    ///     Defaults to the environment variable `COALESCING_STALL_THRESHOLD_SECONDS`, a number of
    ///     seconds, zero or more (`0.5` works); any other value (not a number, negative, infinite)
    ///     is ignored, with one line on standard error the first time a manager reads it.
    public init(
        queue: OperationQueue = OperationQueue(),
        observer: Observer? = nil,
        stallThreshold: Duration? = nil
    ) {
        self.queue = queue
        self.events = observer.map(EventChannel.init)
        self.stallThreshold = stallThreshold ?? environmentStallThreshold
    }

    /// What the manager has done since it was created: work started and how it ended, callers who
    /// joined, withdrew or timed out. A snapshot, exact under concurrency.
    public var statistics: CoalescingStatistics {
        index.withLock { $0.statistics }
    }

    // MARK: Enqueuing

    /// Enqueues `operation`, or folds it into identical work already in flight.
    ///
    /// - If an operation with the same identifier and `Value` type is pending or running, and its
    ///   result is not yet decided, `operation` joins it: it is not queued, and its completion
    ///   handler receives the shared result on its own `callBackQueue`. Its `queuePriority` and
    ///   `qualityOfService` count among the callers' priorities, which the work follows while it
    ///   waits.
    /// - Otherwise `operation` is added to ``queue``.
    /// - An operation that is not fresh (already enqueued here or in another manager, absorbed,
    ///   started, finished or cancelled) is left as it is: it is never added twice, and its handler
    ///   still runs exactly once. One cancelled before it was ever enqueued is added to ``queue``
    ///   all the same, which finishes it without calling `main()`, so that what depends on it runs.
    ///
    /// - Parameters:
    ///   - operation: A new operation.
    ///   - timeout: How long this caller waits at most. When it passes first, this caller alone is
    ///     withdrawn and receives `.failure(CoalescingError.timedOut)`; nil, the default, waits for
    ///     the work however long it takes, and costs nothing. Zero or negative passes at once; a
    ///     timeout longer than anything schedulable (about 292 years) never passes, as if nil.
    /// - Returns: A handle whose ``CoalescingHandle/cancel()`` withdraws this caller only.
    @inlinable @discardableResult  // Specialized in the caller's module: see BENCHMARKS.md.
    public func enqueue<Value>(operation: CoalescibleOperation<Value>, timeout: Duration? = nil) -> CoalescingHandle<
        Value
    > {
        // Read before locking: the getters are overridable, and no user code runs under our locks.
        let priority = OperationPriority(of: operation)
        let key = OperationKey(identifier: operation.identifier, valueType: Value.self)

        // Also returns the operation whose priority this thread must write, if any.
        let (admission, applying): (CoalescingHandle<Value>.Admission, CoalescibleOperation<Value>?) =
            index.withLock { index in
                if let entry = index.inFlight[key] {
                    // The key holds the value type, so the entry is a `CoalescibleOperation<Value>`.
                    let host = unsafeDowncast(entry, to: CoalescibleOperation<Value>.self)
                    switch host.absorb(operation, priority: priority, events: events) {
                    case .absorbed(_, let applyPriority):
                        index.statistics.recordJoin()
                        return (.joinedWork, applyPriority ? host : nil)
                    case .operationUnavailable:
                        return (.ignored, nil)
                    case .operationCarriesOthers:
                        // It runs as work of its own, beside the indexed work, so that its callers
                        // hear back; the index keeps pointing at the work already in flight.
                        guard claim(operation, key: key, priority: priority) else { return (.ignored, nil) }
                        index.statistics.recordStart()
                        return (.startedWork, operation)
                    case .hostUnavailable:
                        break  // Its result is decided: start new work instead.
                    }
                }
                guard claim(operation, key: key, priority: priority) else { return (.ignored, nil) }
                index.inFlight[key] = operation
                index.statistics.recordStart()
                return (.startedWork, operation)
            }

        if admission == .startedWork {
            queue.addOperation(operation)
            if let stallThreshold {
                watchForStall(operation, after: stallThreshold)
            }
        } else if admission == .ignored {
            handOverIfCancelledBeforeEnqueue(operation)
        }
        applying?.applyPriority()
        events?.drain()
        let handle = CoalescingHandle(admission, operation: operation, slot: operation.ownCallerSlot)
        if let timeout {
            handle.withdraw(after: timeout)
        }
        return handle
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
    ///     ``CoalescibleOperation/init(identifier:)``. If it has a completion handler of its own,
    ///     that handler is called too.
    ///   - completionHandler: Called exactly once with the shared result, or with
    ///     `.failure(ConcurrentOperationError.cancelled)` or `.failure(CoalescingError.timedOut)`.
    /// - Returns: A handle whose ``CoalescingHandle/cancel()`` withdraws this caller only.
    @inlinable @discardableResult
    public func enqueue<Value>(
        identifier: String,
        callBackQueue: OperationQueue? = OperationQueue.current ?? .main,
        priority: OperationPriority? = nil,
        timeout: Duration? = nil,
        makeOperation: () -> CoalescibleOperation<Value>,
        completionHandler: @escaping (Result<Value, Error>) -> Void
    ) -> CoalescingHandle<Value> {
        let caller = Caller<Value>.handler(completionHandler, queue: callBackQueue)
        let handle =
            join(identifier: identifier, caller, priority: priority)
            ?? startWork(for: caller, priority: priority, makeOperation: makeOperation)
        if let timeout {
            handle.withdraw(after: timeout)
        }
        return handle
    }

    /// Adds `caller` to the work in flight for `identifier`, if there is any: one look-up and one
    /// append, inlined into the caller so that it is specialized for its `Value` type.
    @inlinable
    func join<Value>(identifier: String, _ caller: Caller<Value>, priority: OperationPriority?) -> CoalescingHandle<
        Value
    >? {
        let key = OperationKey(identifier: identifier, valueType: Value.self)
        let joined: (host: CoalescibleOperation<Value>, slot: Int, applyPriority: Bool)? = index.withLock { index in
            guard let entry = index.inFlight[key] else { return nil }
            // The key holds the value type, so the entry is a `CoalescibleOperation<Value>`.
            let host = unsafeDowncast(entry, to: CoalescibleOperation<Value>.self)
            guard case .joined(let slot, _, let applyPriority) = host.join(caller, priority: priority, events: events)
            else { return nil }
            index.statistics.recordJoin()
            return (host, slot, applyPriority)
        }
        guard let joined else { return nil }
        if joined.applyPriority {
            joined.host.applyPriority()
        }
        events?.drain()
        return CoalescingHandle(.joinedWork, operation: joined.host, slot: joined.slot)
    }

    /// Starts new work for `caller` with an operation from `makeOperation`, which joins work
    /// started meanwhile if there is some.
    @usableFromInline
    func startWork<Value>(
        for caller: Caller<Value>, priority: OperationPriority?, makeOperation: () -> CoalescibleOperation<Value>
    ) -> CoalescingHandle<Value> {
        let operation = makeOperation()
        guard case .joined(let slot, _, _) = operation.state.withLock({ $0.join(caller, priority: priority) }) else {
            // `makeOperation` returned an operation that already finished or was cancelled.
            ConcurrentOperation<Value>.tell(caller, ConcurrentOperationError.cancelled)
            handOverIfCancelledBeforeEnqueue(operation)
            return CoalescingHandle(.ignored, operation: nil, slot: nil)
        }
        let admission = enqueue(operation: operation).admission
        return CoalescingHandle(admission, operation: operation, slot: slot)
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
            if concurrent.claimForQueue() {
                queue.addOperation(operation)
            } else {
                handOverIfCancelledBeforeEnqueue(operation)
            }
        } else if !operation.isFinished && !operation.isExecuting {
            queue.addOperation(operation)
        }
    }

    /// Adds an operation cancelled before it was ever enqueued to ``queue``, once: Foundation then
    /// finishes it without calling `main()`, as a plain `OperationQueue` does, so that operations
    /// depending on it run, and it unregisters from its own dependencies as it finishes. Its
    /// callers have already heard `.cancelled`; nothing else counts it.
    @usableFromInline
    func handOverIfCancelledBeforeEnqueue(_ operation: Operation) {
        if let concurrent = operation as? any QueueClaimable, concurrent.claimIfDecidedBeforeEnqueue() {
            queue.addOperation(operation)
        }
    }

    // MARK: Cancelling and forgetting

    /// Cancels the work with `identifier`, of any `Value` type, for all its callers: each receives
    /// `.failure(ConcurrentOperationError.cancelled)` once. The next operation with this
    /// identifier starts new work.
    ///
    /// - Parameter identifier: The identifier of the work to cancel.
    /// - Returns: Whether any such work was in flight.
    @discardableResult
    public func cancel(identifier: String) -> Bool {
        // Cancel outside the lock: cancelling calls back into `workEnded`.
        let operations = index.withLock { index in
            index.inFlight.compactMap { $0.key.identifier == identifier ? $0.value : nil }
        }
        for operation in operations {
            operation.cancel()
        }
        return !operations.isEmpty
    }

    /// Cancels everything on ``queue``, coalesced or not, for example when the user logs out.
    ///
    /// Every caller of coalesced work receives `.failure(ConcurrentOperationError.cancelled)` once.
    /// Other operations are cancelled through `queue.cancelAllOperations()`, which does nothing for
    /// `OperationQueue.main` on Linux.
    public func cancelAll() {
        let operations = index.withLock { Array($0.inFlight.values) }
        for operation in operations {
            operation.cancel()
        }
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
    @discardableResult
    public func forget(identifier: String) -> Bool {
        index.withLock { index in
            let keys = index.inFlight.keys.filter { $0.identifier == identifier }
            for key in keys {
                index.inFlight[key] = nil
            }
            return !keys.isEmpty
        }
    }

    // MARK: Bookkeeping

    /// Claims a fresh operation as work of this manager.
    @usableFromInline
    func claim<Value>(_ operation: CoalescibleOperation<Value>, key: OperationKey, priority: OperationPriority)
        -> Bool
    {
        let isTimed = events != nil || stallThreshold != nil
        let registration = Registration(
            manager: self, key: key, startedAt: isTimed ? DispatchTime.now().uptimeNanoseconds : nil)
        return operation.claim(
            Admission(registration: registration, priority: PriorityTracker(own: priority)), events: events)
    }

    /// Notes that `operation`'s work ended: drops its index entry, unless other work has taken its
    /// key since (or it was forgotten), counts it, and tells the observer.
    ///
    /// `leaving` are the absorbed operations that withdrew by themselves as the work settled: they
    /// found the host deciding, so they are counted here.
    @usableFromInline
    func workEnded(
        _ operation: Operation, _ registration: Registration, outcome: WorkOutcome, callersServed: Int,
        leaving: [WithdrawalReason]
    ) {
        index.withLock { index in
            if index.inFlight[registration.key] === operation {
                index.inFlight[registration.key] = nil
            }
            for reason in leaving {
                index.statistics.recordWithdrawal(reason)
            }
            index.statistics.recordEnd(outcome, callersServed: callersServed)
        }
        if let events {
            // Recorded after the work's lock was released, and still after every join and
            // withdrawal: those are recorded under that lock, before the result was decided.
            for reason in leaving {
                events.record(.callerWithdrawn(key: registration.key.identifier, reason: reason))
            }
            let duration =
                registration.startedAt.map {
                    Duration.nanoseconds(Int64(clamping: DispatchTime.now().uptimeNanoseconds - $0))
                } ?? .zero
            events.record(
                .workEnded(
                    key: registration.key.identifier, outcome: outcome, callersServed: callersServed, duration: duration
                ))
            events.drain()
        }
    }

    /// Counts a caller that withdrew or timed out, and delivers the event recorded for it.
    func callerWithdrawn(_ reason: WithdrawalReason) {
        index.withLock { $0.statistics.recordWithdrawal(reason) }
        events?.drain()
    }

    /// Reports `operation` once if it is still in flight with callers after `threshold`.
    @usableFromInline
    func watchForStall<Value>(_ operation: CoalescibleOperation<Value>, after threshold: Duration) {
        schedule(after: threshold) { [weak self, weak operation] in
            guard let self, let operation else { return }
            let callers = operation.state.withLock { $0.callerCount }
            guard callers > 0 else { return }
            let event = CoalescingEvent<String>.workStalled(
                key: operation.identifier, callers: callers, elapsed: threshold)
            if let events {
                events.record(event)
                events.drain()
            } else {
                let line =
                    "CoalescingOperations: work \"\(operation.identifier)\" has been in flight for \(threshold) "
                    + "with \(callers) caller(s) waiting; does its main() always end in finish(result:)?\n"
                FileHandle.standardError.write(Data(line.utf8))
            }
        }
    }

    /// How many callers wait for the work in flight for `identifier` and `valueType`; for tests.
    func callerCount<Value>(identifier: String, valueType: Value.Type) -> Int {
        let key = OperationKey(identifier: identifier, valueType: valueType)
        guard let entry = index.withLock({ $0.inFlight[key] }) else { return 0 }
        return unsafeDowncast(entry, to: CoalescibleOperation<Value>.self).state.withLock { $0.callerCount }
    }
}

/// The stall threshold `COALESCING_STALL_THRESHOLD_SECONDS` asks for, read once, by the first
/// manager created without one: an app's environment never changes what it means, and an unusable
/// value is reported once, not by every manager.
let environmentStallThreshold = stallThreshold(
    fromEnvironmentValue: ProcessInfo.processInfo.environment["COALESCING_STALL_THRESHOLD_SECONDS"])

/// Reads a stall threshold in seconds. An environment variable must never stop the app: a value
/// that is not a finite number of seconds, zero or more, is ignored with one line on standard error.
func stallThreshold(fromEnvironmentValue value: String?) -> Duration? {
    guard let value else { return nil }
    guard let seconds = Double(value.trimmingCharacters(in: .whitespaces)), seconds.isFinite, seconds >= 0 else {
        let line =
            "CoalescingOperations: ignoring COALESCING_STALL_THRESHOLD_SECONDS=\"\(value)\": "
            + "it must be a number of seconds, zero or more\n"
        FileHandle.standardError.write(Data(line.utf8))
        return nil
    }
    // Far beyond anything schedulable, which means never, and small enough to convert exactly.
    return .seconds(min(seconds, 1e15))
}

/// What makes two coalescible operations the same work: their identifier and their `Value` type.
@usableFromInline
struct OperationKey: Hashable, Sendable {
    @usableFromInline let identifier: String
    @usableFromInline let valueType: ObjectIdentifier

    @inlinable
    init<Value>(identifier: String, valueType: Value.Type) {
        self.identifier = identifier
        self.valueType = ObjectIdentifier(valueType)
    }
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
    func claimForQueue() -> Bool
    func claimIfDecidedBeforeEnqueue() -> Bool
}

extension ConcurrentOperation: QueueClaimable {
    func claimForQueue() -> Bool {
        state.withLock { $0.claim(Admission(registration: nil, priority: nil)) }
    }
}
