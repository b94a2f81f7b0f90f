import Foundation

/// An asynchronous `Operation` that ends by calling ``finish(result:)`` and hands its one
/// `Result` to its completion handler.
///
/// Subclass it, override ``main()`` to start the work, and call ``finish(result:)`` when the work
/// is done, from any thread. The operation reports `isExecuting` and `isFinished` through KVO the
/// way `OperationQueue` requires on every platform, so it never jams a queue:
///
/// ```swift
/// final class ThumbnailOperation: ConcurrentOperation<Data>, @unchecked Sendable {
///     // @unchecked: adds only immutable properties.
///     let url: URL
///     let loader: ThumbnailLoader
///
///     init(url: URL, loader: ThumbnailLoader, completionHandler: @escaping (Result<Data, Error>) -> Void) {
///         self.url = url
///         self.loader = loader
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
/// handler runs exactly once, on ``callBackQueue``, or on the thread that finished the operation
/// when ``callBackQueue`` is nil.
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
    @inlinable
    public init(
        callBackQueue: OperationQueue? = nil,
        completionHandler: ((Result<Value, Error>) -> Void)? = nil
    ) {
        // Inlinable, so that it is specialized in the caller's module: generic, it cost every
        // caller's operation ~0.5 µs of metadata look-ups (BENCHMARKS.md).
        self.callBackQueue = callBackQueue
        self.ownCallerSlot = completionHandler == nil ? nil : 0
        self.state = LockedState(OperationState(caller: completionHandler.map { .handler($0, queue: callBackQueue) }))
        super.init()
    }

    // MARK: Foundation's view

    /// Always true: the operation ends when ``finish(result:)`` is called, not when ``main()``
    /// returns.
    public final override var isAsynchronous: Bool { true }

    /// Whether the queue has started the operation and it has not finished.
    public final override var isExecuting: Bool { state.withLock { $0.isExecuting } }

    /// Whether the operation is done, as far as its queue is concerned.
    ///
    /// A queued operation turns finished only after its queue has started it, even when its
    /// result was decided earlier by ``cancel()``.
    public final override var isFinished: Bool { state.withLock { $0.isFinished } }

    /// Starts the operation: calls ``main()``, or finishes at once if the result is already
    /// decided (cancelled before start). A second call does nothing.
    ///
    /// Queues call this; call it yourself only for an operation that is on no queue.
    public final override func start() {
        // The state may move to executing or straight to finished; announce both around the change.
        let action = postingChanges(to: LifecycleKey.executingAndFinished) {
            state.withLock { $0.start() }
        }
        switch action {
        case .run:
            main()
        case .finishWithoutRunning, .finishBySettling:
            // Its queue may release it as soon as it is finished; this call still holds it.
            releaseDependencies()
        case .none:
            break
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
        if let settlement = state.withLock({ $0.decide() }) {
            settle(settlement, with: result)
        }
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
        // Three steps, in this order. Deciding the result comes before Foundation hears of the
        // cancellation: `super.cancel()` makes an operation that waits on dependencies ready, and
        // its queue may start it at once on another thread, where `start()` must find the result
        // decided and not call `main()`. Settling comes after: Foundation ignores `cancel()` on an
        // operation that reports finished, and running work must see `isCancelled` before any
        // caller hears `.cancelled`.
        let settlement = state.withLock { $0.decide() }
        super.cancel()
        if let settlement {
            settle(settlement, with: .failure(ConcurrentOperationError.cancelled))
        }
    }

    /// Finishes the lifecycle once every caller has the result, or leaves it to `start()` if the
    /// queue has not started the operation yet.
    @usableFromInline
    final func finishLifecycle() {
        if case .finish(let keys, let neverRan) = state.withLock({ $0.settled() }) {
            if neverRan {
                // Whoever holds it (its host's settlement, or the caller that cancelled it) lets
                // go of it once it is finished.
                releaseDependencies()
            }
            postingChanges(to: keys) { state.withLock { $0.markFinished() } }
        }
    }

    /// Removes the dependencies of an operation that finishes without running.
    ///
    /// swift-corelibs-foundation keeps a dependency's dependents unretained, and reaches each of
    /// them when the dependency finishes: an operation released before that crashes the process
    /// then. A queue keeps an operation it runs alive until it finishes, and never starts it
    /// before its dependencies have finished; an operation that finishes without running (absorbed,
    /// or decided before its start) has no such guarantee, so it unregisters first. Foundation
    /// unregisters under the dependency's lock, the lock under which a finishing dependency picks
    /// its dependents, so no dependency can reach the operation afterwards.
    final func releaseDependencies() {
        for dependency in dependencies {
            removeDependency(dependency)
        }
    }

    /// Claims for a queue an operation cancelled before it was enqueued, so that the queue
    /// finishes it, without running it, and what depends on it runs. False for any other
    /// operation, and the second time.
    final func claimIfDecidedBeforeEnqueue() -> Bool {
        state.withLock { $0.claimDecidedBeforeEnqueue() }
    }

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

/// The error an operation finishes with when it is cancelled, or when its caller withdraws.
///
/// Compare with `==`: `if case .failure(let error) = result, error as? ConcurrentOperationError == .cancelled`.
public enum ConcurrentOperationError: Error, Equatable, Sendable {
    /// The work was cancelled, or this caller withdrew before the work finished.
    case cancelled
}

/// The name users of the blog pattern know for ``ConcurrentOperationError``.
public typealias CoalescibleOperationError = ConcurrentOperationError
