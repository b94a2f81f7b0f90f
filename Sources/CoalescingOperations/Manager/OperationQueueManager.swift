import Foundation

/// Runs operations on an `OperationQueue`, coalescing identical ``CoalescibleOperation``s as they
/// are enqueued.
///
/// While an operation with a given identifier and `Value` type is pending or running, every
/// further one with the same identifier and `Value` type joins it instead of being queued: the
/// work runs once and every caller receives the result, each on its own callback queue. Once the
/// work has finished (or was cancelled), the next identical operation starts new work: coalescing
/// is not caching.
///
/// ```swift
/// let manager = OperationQueueManager()
/// manager.enqueue(operation: UserFetchOperation { result in /* tab bar */ })
/// manager.enqueue(operation: UserFetchOperation { result in /* header: joins the first */ })
/// ```
///
/// Share one manager between every part of the app that should coalesce with the others. Finding
/// in-flight work costs one dictionary look-up, whatever the number of pending operations.
///
/// All methods are safe to call from any thread, including from completion handlers. Work in
/// flight keeps its manager alive until its result is decided.
public final class OperationQueueManager: @unchecked Sendable {
    // @unchecked: `queue` is thread-safe itself; `inFlight` is guarded by its lock.

    /// The queue the work runs on.
    ///
    /// Use it to tune concurrency (`maxConcurrentOperationCount`) or to wait for the work
    /// (`waitUntilAllOperationsAreFinished()`). Operations added to it directly are not coalesced.
    public let queue: OperationQueue

    /// The operation running or awaiting each piece of work. An entry leaves when its result is
    /// decided, and only if it still holds that same operation.
    @usableFromInline let inFlight = LockedState<[OperationKey: Operation]>([:])

    /// Creates a manager that runs its work on `queue`.
    ///
    /// - Parameter queue: The queue to add operations to. Defaults to a new concurrent queue.
    public init(queue: OperationQueue = OperationQueue()) {
        self.queue = queue
    }

    // MARK: Enqueuing

    /// Enqueues `operation`, or folds it into identical work already in flight.
    ///
    /// - If an operation with the same identifier and `Value` type is pending or running, and its
    ///   result is not yet decided, `operation` joins it: it is not queued, and its completion
    ///   handler receives the shared result on its own `callBackQueue`. A more urgent
    ///   `queuePriority` or `qualityOfService` raises the shared operation's while it waits.
    /// - Otherwise `operation` is added to ``queue``.
    /// - An operation that is not fresh (already enqueued here or in another manager, absorbed,
    ///   started, finished or cancelled) is left as it is: it is never added twice, and its handler
    ///   still runs exactly once.
    ///
    /// - Parameter operation: A new operation.
    /// - Returns: A handle whose ``CoalescingHandle/cancel()`` withdraws this caller only.
    @discardableResult
    public func enqueue<Value>(operation: CoalescibleOperation<Value>) -> CoalescingHandle<Value> {
        // Read before locking: the getters are overridable, and no user code runs under our locks.
        let priority = OperationPriority(of: operation)
        let key = OperationKey(identifier: operation.identifier, valueType: Value.self)

        // Also returns the operation whose raised priority this thread must write, if any.
        let (admission, priorityToApply): (CoalescingHandle<Value>.Admission, ConcurrentOperation<Value>?) =
            inFlight.withLock { inFlight in
                if let entry = inFlight[key] {
                    // The key holds the value type, so the entry is a `CoalescibleOperation<Value>`.
                    let host = unsafeDowncast(entry, to: CoalescibleOperation<Value>.self)
                    switch host.absorb(operation, priority: priority) {
                    case .absorbed(let applyPriority): return (.joinedWork, applyPriority ? host : nil)
                    case .operationUnavailable: return (.ignored, nil)
                    case .operationCarriesOthers:
                        // It runs as work of its own, beside the indexed work, so that its callers
                        // hear back; the index keeps pointing at the work already in flight.
                        guard operation.claim(registration: nil, priority: priority) else { return (.ignored, nil) }
                        return (.startedWork, operation)
                    case .hostUnavailable: break  // Finished or cancelled: start new work instead.
                    }
                }
                let registration = OperationState<Value>.Registration(manager: self, key: key)
                guard operation.claim(registration: registration, priority: priority) else { return (.ignored, nil) }
                inFlight[key] = operation
                return (.startedWork, operation)
            }

        if admission == .startedWork {
            queue.addOperation(operation)
        }
        priorityToApply?.applyRequestedPriority()
        return CoalescingHandle(admission, operation: operation, slot: operation.ownCallerSlot)
    }

    /// Joins identical work in flight with a completion handler alone, or starts new work built by
    /// `makeOperation`.
    ///
    /// This is the cheapest way to join: no operation is created while work is in flight, so a
    /// caller costs one entry in a list. `makeOperation` is called at most once, on this thread,
    /// and only when no work with this identifier and `Value` type is in flight.
    ///
    /// ```swift
    /// manager.enqueue(identifier: "UserFetchOperation", callBackQueue: queue,
    ///                 makeOperation: { UserFetchOperation(service: service) }) { result in … }
    /// ```
    ///
    /// - Parameters:
    ///   - identifier: The identifier of the operations `makeOperation` builds.
    ///   - callBackQueue: Where `completionHandler` runs; nil runs it on the thread that finishes
    ///     the work. Defaults to `OperationQueue.current ?? .main`.
    ///   - makeOperation: Builds the operation that runs the work, usually with
    ///     ``CoalescibleOperation/init(identifier:)``. If it has a completion handler of its own,
    ///     that handler is called too.
    ///   - completionHandler: Called exactly once with the shared result, or with
    ///     `.failure(ConcurrentOperationError.cancelled)`.
    /// - Returns: A handle whose ``CoalescingHandle/cancel()`` withdraws this caller only.
    @inlinable @discardableResult
    public func enqueue<Value>(
        identifier: String,
        callBackQueue: OperationQueue? = OperationQueue.current ?? .main,
        makeOperation: () -> CoalescibleOperation<Value>,
        completionHandler: @escaping (Result<Value, Error>) -> Void
    ) -> CoalescingHandle<Value> {
        let caller = Subscriber<Value>.handler(completionHandler, queue: callBackQueue)
        if let joined = join(identifier: identifier, caller) {
            return joined
        }
        return startWork(for: caller, makeOperation: makeOperation)
    }

    /// Adds `caller` to the work in flight for `identifier`, if there is any.
    ///
    /// The path every joining caller takes: one look-up and one append, inlined into the caller so
    /// that it is specialized for its `Value` type.
    @inlinable
    func join<Value>(identifier: String, _ caller: Subscriber<Value>) -> CoalescingHandle<Value>? {
        let key = OperationKey(identifier: identifier, valueType: Value.self)
        let joined: (host: CoalescibleOperation<Value>, slot: Int)? = inFlight.withLock { inFlight in
            guard let entry = inFlight[key] else { return nil }
            // The key holds the value type, so the entry is a `CoalescibleOperation<Value>`.
            let host = unsafeDowncast(entry, to: CoalescibleOperation<Value>.self)
            return host.subscribe(caller).map { (host, $0) }
        }
        guard let joined else { return nil }
        return CoalescingHandle(.joinedWork, operation: joined.host, slot: joined.slot)
    }

    /// Starts new work for `caller` with an operation from `makeOperation`, which joins work
    /// started meanwhile if there is some.
    @usableFromInline
    func startWork<Value>(
        for caller: Subscriber<Value>,
        makeOperation: () -> CoalescibleOperation<Value>
    ) -> CoalescingHandle<Value> {
        let operation = makeOperation()
        guard let slot = operation.subscribe(caller) else {
            // `makeOperation` returned an operation that already finished or was cancelled.
            DeliveryBatch.cancel(caller)
            return CoalescingHandle(.ignored, operation: nil, slot: nil)
        }
        let admission = enqueue(operation: operation).admission
        return CoalescingHandle(admission, operation: operation, slot: slot)
    }

    /// Adds an operation to ``queue``; a ``CoalescibleOperation`` is coalesced as by
    /// ``enqueue(operation:)``.
    ///
    /// An operation that is already finished or executing is ignored rather than handed to
    /// Foundation, which would stop the program. So is a ``ConcurrentOperation`` that was already
    /// enqueued by a manager. (An operation of another class that you added to some queue yourself
    /// cannot be recognised; Foundation stops the program if it is added again.)
    ///
    /// - Parameter operation: Any operation.
    public func enqueue(_ operation: Operation) {
        if let managed = operation as? any ManagerEnqueueable {
            managed.enqueue(on: self)
        } else if !operation.isFinished && !operation.isExecuting {
            queue.addOperation(operation)
        }
    }

    // MARK: Cancelling

    /// Cancels the work with `identifier`, of any `Value` type, for all its callers: each receives
    /// `.failure(ConcurrentOperationError.cancelled)` once. The next operation with this
    /// identifier starts new work.
    ///
    /// - Parameter identifier: The identifier of the work to cancel.
    public func cancel(identifier: String) {
        // Cancel outside the lock: cancelling calls back into `operationDidResolve`.
        let operations = inFlight.withLock { inFlight in
            inFlight.compactMap { $0.key.identifier == identifier ? $0.value : nil }
        }
        for operation in operations {
            operation.cancel()
        }
    }

    /// Cancels everything on ``queue``, coalesced or not, for example when the user logs out.
    ///
    /// Every caller of coalesced work receives `.failure(ConcurrentOperationError.cancelled)` once.
    /// Other operations are cancelled through `queue.cancelAllOperations()`, which does nothing for
    /// `OperationQueue.main` on Linux.
    public func cancelAll() {
        let operations = inFlight.withLock { Array($0.values) }
        for operation in operations {
            operation.cancel()
        }
        queue.cancelAllOperations()
    }

    // MARK: Bookkeeping

    /// How many callers wait for the work in flight for `identifier` and `valueType`; for tests.
    func waitingCallers<Value>(identifier: String, valueType: Value.Type) -> Int {
        let key = OperationKey(identifier: identifier, valueType: valueType)
        guard let entry = inFlight.withLock({ $0[key] }) else { return 0 }
        return unsafeDowncast(entry, to: CoalescibleOperation<Value>.self).state.withLock { $0.liveCallers }
    }

    /// Forgets `operation`'s entry, unless new work has taken its key since.
    @usableFromInline
    func operationDidResolve(_ operation: Operation, key: OperationKey) {
        inFlight.withLock { inFlight in
            if inFlight[key] === operation {
                inFlight[key] = nil
            }
        }
    }
}
