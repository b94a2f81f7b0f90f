import Foundation

/// An asynchronous `Operation` that ends by calling ``finish(result:)`` and hands its one
/// `Result` to its completion handler.
///
/// Subclass it, override ``main()`` to start the work, and call ``finish(result:)`` when the work
/// is done, from any thread. The operation reports `isExecuting` and `isFinished` through KVO the
/// way `OperationQueue` requires on every platform, so it never jams a queue:
///
/// ```swift
/// final class ThumbnailOperation: ConcurrentOperation<Data> {
///     let url: URL
///
///     init(url: URL, completionHandler: @escaping (Result<Data, Error>) -> Void) {
///         self.url = url
///         super.init(callBackQueue: .main, completionHandler: completionHandler)
///     }
///
///     override func main() {
///         loader.load(url) { self.finish(result: $0) }
///     }
/// }
/// ```
///
/// ## The result
/// The first call to ``finish(result:)`` decides the result; later calls are ignored, so work
/// that completes while the operation is being cancelled cannot call back twice. The completion
/// handler runs exactly once, on ``ConcurrentOperation/callBackQueue``, or on the thread that finished the operation
/// when ``ConcurrentOperation/callBackQueue`` is nil.
///
/// ## Cancellation
/// ``cancel()`` decides the result as `.failure(ConcurrentOperationError.cancelled)` and calls
/// the handler at once. If the queue has not started the operation yet, the operation itself only
/// reports `isFinished` when the queue starts it (without calling ``main()``): Foundation's queues
/// break when a queued operation finishes before they have started it.
///
/// All callers receive the same `Value` instance. If `Value` is a class with mutable state, making
/// it safe to share between their queues is up to you.
open class ConcurrentOperation<Value>: Operation, @unchecked Sendable {
    // @unchecked: every mutable property lives in `state`, guarded by its lock; the rest is `let`.

    /// The queue the completion handler runs on; nil runs it on the thread that finishes the
    /// operation.
    public let callBackQueue: OperationQueue?

    @usableFromInline let state: LockedState<OperationState<Value>>

    /// The slot of the operation's own completion handler among its callers.
    @usableFromInline let ownCallerSlot: Int?

    /// Creates an operation that calls `completionHandler` once with its result.
    ///
    /// - Parameters:
    ///   - callBackQueue: The queue to call `completionHandler` on. The default, nil, calls it on
    ///     the thread that finishes the operation.
    ///   - completionHandler: Called exactly once: with the result given to ``finish(result:)``,
    ///     or with `.failure(ConcurrentOperationError.cancelled)` after ``cancel()``.
    public init(
        callBackQueue: OperationQueue? = nil,
        completionHandler: ((Result<Value, Error>) -> Void)? = nil
    ) {
        self.callBackQueue = callBackQueue
        self.ownCallerSlot = completionHandler == nil ? nil : 0
        self.state = LockedState(
            OperationState(caller: completionHandler.map { .handler($0, queue: callBackQueue) })
        )
        super.init()
    }

    // MARK: Foundation's view

    /// Always true: the operation ends when ``finish(result:)`` is called, not when ``main()``
    /// returns.
    public final override var isAsynchronous: Bool { true }

    /// Whether the queue has started the operation and it has not finished.
    public final override var isExecuting: Bool { state.withLock { $0.phase == .executing } }

    /// Whether the operation is done, as far as its queue is concerned.
    ///
    /// A queued operation turns finished only after its queue has started it, even when its
    /// result was decided earlier by ``cancel()``.
    public final override var isFinished: Bool { state.withLock { $0.phase == .finished } }

    /// Starts the operation: calls ``main()``, or finishes at once if the result is already
    /// decided (cancelled before start). A second call does nothing.
    ///
    /// Queues call this; call it yourself only for an operation that is on no queue.
    public final override func start() {
        // The phase may move to executing or straight to finished; announce both around the change.
        let action = postingChanges(to: LifecycleKey.executingAndFinished) {
            state.withLock { $0.begin() }
        }
        if action == .run {
            main()
        }
    }

    /// Starts the work. Override it, and make sure every path ends in ``finish(result:)``.
    ///
    /// Runs on the thread the queue started the operation on. Return as soon as the work is
    /// under way; an asynchronous operation stays executing until it is finished.
    open override func main() {
        preconditionFailure("\(type(of: self)) must override main() and end its work with finish(result:)")
    }

    /// Decides the operation's result and hands it to every caller.
    ///
    /// The first call wins; later calls, and calls after ``cancel()``, are ignored. Safe to call
    /// from any thread, including from inside ``main()``. No lock is held while callers' handlers
    /// run or while KVO notifications are posted, so handlers may enqueue, cancel or finish other
    /// operations.
    ///
    /// - Parameter result: The value, or the error, every caller receives.
    @inlinable
    public final func finish(result: Result<Value, Error>) {
        var batch = DeliveryBatch<Value>()
        guard resolve(with: result, into: &batch) else { return }
        settle()
        batch.deliver(result)
    }

    /// Cancels the operation: every caller still waiting receives
    /// `.failure(ConcurrentOperationError.cancelled)`, once.
    ///
    /// - Before the queue starts the operation, this only decides the result; the queue then
    ///   starts it, and it finishes without calling ``main()``.
    /// - While executing, the operation finishes at once; a later ``finish(result:)`` from the
    ///   work is ignored. Override to stop the work too (cancel a data task), and call `super`.
    /// - After the operation finished, this does nothing.
    /// - For a ``CoalescibleOperation`` that was absorbed into another operation, this withdraws
    ///   its caller only; see ``CoalescibleOperation``.
    open override func cancel() {
        if let host = state.withLock({ $0.host }) {
            // Serving the withdrawn slot resolves this operation with `.cancelled`.
            host.operation.withdraw(slot: host.slot)
            super.cancel()
            return
        }
        // Three steps, in this order. Deciding the result comes before Foundation hears of the
        // cancellation: `super.cancel()` makes an operation that waits on dependencies ready, and
        // its queue may start it at once on another thread, where `start()` must find the result
        // decided and not call `main()`. Settling comes after: Foundation ignores `cancel()` on an
        // operation that reports finished, and running work must see `isCancelled`, before any
        // caller hears `.cancelled`.
        let cancelled = Result<Value, Error>.failure(ConcurrentOperationError.cancelled)
        var batch = DeliveryBatch<Value>()
        let isDecidedHere = resolve(with: cancelled, into: &batch)
        super.cancel()
        if isDecidedHere {
            settle()
            batch.deliver(cancelled)
        }
    }

    // MARK: Callers

    /// Decides the result and adds every waiting caller to `batch`; absorbed operations are
    /// resolved and settled on the way. The caller then calls ``settle()`` and delivers `batch`.
    ///
    /// - Returns: False if the result had already been decided.
    @inlinable
    final func resolve(with result: Result<Value, Error>, into batch: inout DeliveryBatch<Value>) -> Bool {
        guard let resolution = state.withLock({ $0.resolve() }) else { return false }
        if let registration = resolution.registration {
            leave(registration)
        }
        // Absorbed operations finish here, before this one does: once a queue sees this operation
        // finished (and `waitUntilAllOperationsAreFinished()` returns), so have they.
        batch.add(resolution.callers, sharing: resolution.callerQueues, result)
        return true
    }

    /// Tells the manager that admitted this operation that its work is decided.
    @usableFromInline
    final func leave(_ registration: OperationState<Value>.Registration) {
        registration.manager.operationDidResolve(self, key: registration.key)
    }

    /// Records that every caller has the result, and finishes the lifecycle if `start()` ran.
    @usableFromInline
    final func settle() {
        if let keys = state.withLock({ $0.settle() }) {
            postingChanges(to: keys) { state.withLock { $0.markFinished() } }
        }
    }

    /// Adds a caller to this operation's work, unless its result is already decided.
    ///
    /// - Returns: The caller's slot, for ``withdraw(slot:)``.
    @inlinable
    final func subscribe(_ caller: Subscriber<Value>) -> Int? {
        state.withLock { $0.subscribe(caller) }
    }

    /// Withdraws the caller in `slot`: it receives `.cancelled` unless the result is already on
    /// its way, and the work is cancelled if nobody else is waiting for it.
    @usableFromInline
    final func withdraw(slot: Int?) {
        let (removed, abandoned) = state.withLock { $0.withdraw(slot: slot) }
        if let removed {
            DeliveryBatch.cancel(removed)
        }
        if abandoned {
            cancel()
        }
    }

    /// Outcomes of ``absorb(_:priority:)``.
    enum Absorption {
        /// The operation now rides on this one; `applyPriority` says whether the caller must call
        /// ``applyRequestedPriority()``.
        case absorbed(applyPriority: Bool)
        /// The operation cannot ride on anything: it is queued, absorbed, started or decided.
        case operationUnavailable
        /// The operation is fresh but carries operations it absorbed by hand: it must run its own
        /// work, because delivery never nests more than one level.
        case operationCarriesOthers
        /// This operation takes no more operations: its result is decided, or it rides on another.
        case hostUnavailable
    }

    /// Makes `operation` ride on this operation's work, atomically with respect to both.
    ///
    /// - Parameters:
    ///   - operation: The operation to absorb; it must be fresh.
    ///   - priority: The joining caller's priority, to raise this operation's while it waits.
    /// - Returns: Whether `operation` was absorbed, or which of the two was unavailable.
    final func absorb(_ operation: ConcurrentOperation<Value>, priority: OperationPriority?) -> Absorption {
        guard operation !== self else { return .operationUnavailable }
        return withBothStates(self, operation) { host, joiner in
            guard joiner.isFresh else { return .operationUnavailable }
            guard !joiner.hasAbsorbed else { return .operationCarriesOthers }
            guard host.canAbsorb else { return .hostUnavailable }
            joiner.becomeAbsorbed(by: self, slot: host.absorb(operation))
            let applyPriority = priority.map { host.request($0) } ?? false
            return .absorbed(applyPriority: applyPriority)
        }
    }

    /// Claims the operation for a manager's queue. False if it is not idle (queued elsewhere,
    /// absorbed, started, or its result decided).
    final func claim(registration: OperationState<Value>.Registration?, priority: OperationPriority?) -> Bool {
        state.withLock { $0.claim(registration: registration, priority: priority) }
    }

    /// Adds the operation to `manager`'s queue, unless it is not idle; ``CoalescibleOperation``
    /// coalesces instead.
    func enqueue(on manager: OperationQueueManager) {
        if claim(registration: nil, priority: nil) {
            manager.queue.addOperation(self)
        }
    }

    /// Writes raised priorities to Foundation until none is left; called by the one thread that
    /// holds the right to apply them (see `OperationState.request(_:)`).
    final func applyRequestedPriority() {
        while let priority = state.withLock({ $0.nextPriorityToApply() }) {
            queuePriority = priority.queuePriority
            qualityOfService = priority.qualityOfService
        }
    }

    // MARK: Helpers

    /// Wraps a state change in KVO notifications, posted with no lock held: Foundation reads the
    /// properties back synchronously, and a thread waiting in `waitUntilAllOperationsAreFinished()`
    /// holds Foundation's lock while it reads `isFinished`.
    private final func postingChanges<Result>(to keys: [String], _ change: () -> Result) -> Result {
        for key in keys {
            willChangeValue(forKey: key)
        }
        let result = change()
        for key in keys.reversed() {
            didChangeValue(forKey: key)
        }
        return result
    }
}

extension ConcurrentOperation: ManagerEnqueueable {}

/// Runs `body` holding the locks of two distinct operations, always taken in the same (address)
/// order, so that two threads absorbing the pair in opposite directions cannot deadlock.
private func withBothStates<Value, Result>(
    _ first: ConcurrentOperation<Value>,
    _ second: ConcurrentOperation<Value>,
    _ body: (inout OperationState<Value>, inout OperationState<Value>) -> Result
) -> Result {
    if ObjectIdentifier(first) < ObjectIdentifier(second) {
        first.state.withLock { a in second.state.withLock { b in body(&a, &b) } }
    } else {
        second.state.withLock { b in first.state.withLock { a in body(&a, &b) } }
    }
}
