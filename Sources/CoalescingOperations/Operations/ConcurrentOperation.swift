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
///     let url: URL
///     let loader: ThumbnailLoader
///
///     init(url: URL, loader: ThumbnailLoader, completionHandler: @escaping @Sendable (Result<Data, Error>) -> Void) {
///         self.url = url
///         self.loader = loader
///         super.init(completionHandler: completionHandler)
///     }
///
///     override func main() {
///         loader.load(url) { self.finish(result: $0) }
///     }
/// }
/// ```
///
/// A subclass restates `@unchecked Sendable`: Swift requires it of every subclass of an
/// `@unchecked Sendable` class, and `Operation` is one, so the compiler cannot check a subclass's
/// own stored properties. Keep them `let`s of `Sendable` types, as above, and the subclass is as
/// safe as the library.
///
/// ## The result
/// The first call to ``finish(result:)`` decides the result; later calls are ignored, so work
/// that completes while the operation is being cancelled cannot call back twice. The completion
/// handler runs exactly once, on ``callBackQueue``, or on the thread that finished the operation
/// when ``callBackQueue`` is nil, the default.
///
/// ## Cancellation
/// ``cancel()`` decides the result as `.failure(CoalescingError.cancelled)` and calls
/// the handler at once. If the queue has not started the operation yet, the operation itself only
/// reports `isFinished` when the queue starts it (without calling ``main()``): Foundation's queues
/// break when a queued operation finishes before they have started it.
///
/// All callers receive the same `Value` instance, on their own queues: `Value` is `Sendable`, so
/// the compiler checks that sharing it is safe.
open class ConcurrentOperation<Value: Sendable>: Operation, @unchecked Sendable {
    // @unchecked: the mutable state is `lifecycle` and `completionHandler`, both guarded by
    // `lifecycle`'s lock; the rest is `let`.

    /// The queue the completion handler runs on; nil runs it on the thread that finishes the
    /// operation.
    public let callBackQueue: OperationQueue?

    /// A completion handler: the operation's own caller.
    @usableFromInline typealias Handler = @Sendable (Result<Value, Error>) -> Void

    /// The operation's own caller until its one call is made, or handed to the work the operation
    /// runs: let go of then, so that a handler that captures its own operation does not keep it
    /// alive (Guarantee 2). Read and written only under `lifecycle`'s lock.
    @usableFromInline @exclusivity(unchecked) final var completionHandler: Handler?

    /// Whether the operation was created with a completion handler: a caller of its own.
    @usableFromInline let hasOwnCaller: Bool

    @usableFromInline let lifecycle: LockedState<Lifecycle>

    /// Creates an operation that calls `completionHandler` once with its result.
    ///
    /// - Parameters:
    ///   - callBackQueue: The queue to call `completionHandler` on. The default, nil, calls it on
    ///     the thread that finishes the operation, with no queue hop.
    ///   - completionHandler: Called exactly once: with the result given to ``finish(result:)``,
    ///     or with `.failure(CoalescingError.cancelled)` after ``cancel()``. `@Sendable`, since it
    ///     runs on another thread: the compiler checks what it captures. Nil for an operation
    ///     whose callers come another way.
    @inlinable public init(
        callBackQueue: OperationQueue? = nil,
        completionHandler: (@Sendable (Result<Value, Error>) -> Void)? = nil
    ) {
        // Inlinable, so that it is specialized in the caller's module: generic, it cost every
        // caller's operation ~0.5 µs of metadata look-ups (BENCHMARKS.md).
        self.callBackQueue = callBackQueue
        self.completionHandler = completionHandler
        hasOwnCaller = completionHandler != nil
        lifecycle = LockedState(.idle(onQueue: false))
        super.init()
    }

    /// Always true: the operation ends when ``finish(result:)`` is called, not when ``main()``
    /// returns.
    public final override var isAsynchronous: Bool { true }

    /// Whether the queue has started the operation and it has not finished.
    public final override var isExecuting: Bool {
        lifecycle.withLock { $0 == .executing || $0 == .finishing }
    }

    /// Whether the operation is done, as far as its queue is concerned.
    ///
    /// A queued operation turns finished only after its queue has started it, even when its
    /// result was decided earlier by ``cancel()``.
    public final override var isFinished: Bool {
        lifecycle.withLock { $0 == .finished }
    }

    /// Starts the operation: calls ``main()``, or finishes at once if the result is already
    /// decided (cancelled before start). A second call does nothing.
    ///
    /// Queues call this; call it yourself only for an operation that is on no queue.
    public final override func start() {
        // The state may move to executing or straight to finished; announce both around the change.
        let step = postingChanges(to: ["isExecuting", "isFinished"]) {
            lifecycle.withLock { lifecycle -> Lifecycle? in
                let before = lifecycle
                switch lifecycle {
                case .idle: lifecycle = .executing
                case .decidedBeforeStart: lifecycle = .finished
                case .executing, .finishing, .finished: return nil
                }
                return before
            }
        }
        switch step {
        case .idle? where willRun(): main()
        case .idle?, .decidedBeforeStart?:
            // Finished without running: its queue may let go of it now; this call still holds it.
            releaseDependencies()
        case .executing?, .finishing?, .finished?, nil: break
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
    @inlinable public final func finish(result: Result<Value, Error>) { end(with: result, cancelling: false) }

    /// Reports how far the work has got, from any thread, as often as it likes: every caller that
    /// asked for progress receives it on its own queue, the latest value winning when updates
    /// come faster than a caller takes them, and always before the result (Guarantees 24 to 27).
    /// Ignored once the result is decided, before the operation is enqueued, and by an operation
    /// that joined other work: nobody asked it for progress.
    ///
    /// - Parameter progress: How far the work has got.
    public final func report(progress: WorkProgress) { reported(progress) }

    /// Cancels the operation: every caller still waiting receives
    /// `.failure(CoalescingError.cancelled)`, once.
    ///
    /// - Before the queue starts the operation, this only decides the result; the queue then
    ///   starts it, and it finishes without calling ``main()``.
    /// - While executing, the operation finishes at once; a later ``finish(result:)`` from the
    ///   work is ignored. Override to stop the work too (cancel a data task), and call `super`.
    /// - After the operation finished, this does nothing.
    /// - For a ``CoalescibleOperation`` that joined other work, this withdraws its caller only,
    ///   which hears `CancellationError`; see ``CoalescibleOperation``.
    open override func cancel() { end(with: .failure(CoalescingError.cancelled), cancelling: true) }

    // MARK: What a subclass of the library's changes

    /// Decides the result and hands it to the operation's own caller. Deciding comes before
    /// Foundation hears of a cancellation (`cancelling`): `super.cancel()` makes an operation that
    /// waits on dependencies ready, and its queue may start it at once on another thread, where
    /// `start()` must find the result decided. Serving comes after: running work sees
    /// `isCancelled` before its caller hears.
    @usableFromInline func end(with result: Result<Value, Error>, cancelling: Bool) {
        let completionHandler = resultDecided()
        if cancelling { cancelInFoundation() }
        if let completionHandler {
            if let callBackQueue {
                callBackQueue.addOperation(DeliveryOperation { completionHandler(result) })
            } else {
                completionHandler(result)
            }
        }
    }

    /// Whether `start()` goes on to `main()`.
    func willRun() -> Bool { true }

    /// Where reported progress goes: nobody asked a plain operation for it.
    func reported(_ progress: WorkProgress) {}
}
