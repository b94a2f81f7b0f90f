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
    // @unchecked: every mutable property lives in `lifecycle`, guarded by its lock; the rest is `let`.

    /// The queue the completion handler runs on; nil runs it on the thread that finishes the
    /// operation.
    public let callBackQueue: OperationQueue?

    @usableFromInline let lifecycle: LockedState<Lifecycle<Value>>

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
        let own = completionHandler.map { Caller<Value>.handler($0, queue: callBackQueue) }
        lifecycle = LockedState(.idle(.own(own), onQueue: false))
        super.init()
    }

    /// Always true: the operation ends when ``finish(result:)`` is called, not when ``main()``
    /// returns.
    public final override var isAsynchronous: Bool { true }

    /// Whether the queue has started the operation and it has not finished.
    public final override var isExecuting: Bool {
        lifecycle.withLock { if case .executing = $0 { true } else { false } }
    }

    /// Whether the operation is done, as far as its queue is concerned.
    ///
    /// A queued operation turns finished only after its queue has started it, even when its
    /// result was decided earlier by ``cancel()``.
    public final override var isFinished: Bool {
        lifecycle.withLock { if case .finished = $0 { true } else { false } }
    }

    /// Starts the operation: calls ``main()``, or finishes at once if the result is already
    /// decided (cancelled before start). A second call does nothing.
    ///
    /// Queues call this; call it yourself only for an operation that is on no queue.
    public final override func start() {
        // The state may move to executing or straight to finished; announce both around the change.
        let step = postingChanges(to: ["isExecuting", "isFinished"]) {
            lifecycle.withLock { lifecycle -> StartStep in
                switch lifecycle {
                case .idle(let link, _):
                    lifecycle = .executing(link)
                    if case .work(let engine, let work, _) = link { return .run(engine, work) }
                    return .run(nil, nil)
                case .decidedBeforeStart:
                    lifecycle = .finished
                    return .finishedWithoutRunning
                case .executing, .riding, .finished:
                    return .none
                }
            }
        }
        switch step {
        case .run(let engine, let work):
            // From here the work's priority stays as it is; work decided meanwhile does not run.
            if let engine, let work, !engine.begin(work) {
                releaseDependencies()
            } else {
                main()
            }
        case .finishedWithoutRunning:
            // Its queue may let go of it once it is finished; this call still holds it.
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
    @inlinable public final func finish(result: Result<Value, Error>) {
        if let (engine, work) = ownWork() {
            engine.settle(work, with: result)
        } else {
            leaveRide(with: result)
        }
    }

    /// Reports how far the work has got, from any thread, as often as it likes: every caller that
    /// asked for progress receives it on its own queue, the latest value winning when updates
    /// come faster than a caller takes them, and always before the result (Guarantees 24 to 27).
    /// Ignored once the result is decided, and by an operation that joined other work.
    ///
    /// - Parameter progress: How far the work has got.
    public final func report(progress: WorkProgress) {
        if let (engine, work) = ownWork() {
            engine.report(progress, for: work)
        }
    }

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
    open override func cancel() {
        guard let (engine, work) = ownWork() else {
            if case .riding(let engine, let work, let slot, _) = lifecycle.withLock({ $0 }) {
                super.cancel()
                engine.withdraw(work, slot: slot, reason: .withdrawn)
            }
            return
        }
        // Three steps, in this order. Deciding comes before Foundation hears of it:
        // `super.cancel()` makes an operation that waits on dependencies ready, and its queue may
        // start it at once on another thread, where `start()` must find the work decided. Serving
        // comes after: running work sees `isCancelled` before any caller hears.
        let effects = engine.state.withLock { $0.end(work, with: .failure(CoalescingError.cancelled), stopping: false) }
        super.cancel()
        engine.carryOut(effects)
    }

    /// An absorbed operation finishing by itself leaves the work it rode on with its own result.
    @usableFromInline final func leaveRide(with result: Result<Value, Error>) {
        guard case .riding(let engine, let work, let slot, let own) = lifecycle.withLock({ $0 }) else { return }
        // Finished first, so that the engine finds nobody left to serve in its slot.
        postingChanges(to: ["isFinished"]) { lifecycle.withLock { $0 = .finished } }
        own?.tell(result)
        engine.withdraw(work, slot: slot, reason: .withdrawn)
    }
}

/// What `start()` does once its lifecycle moved: run the work (and tell the engine, if one holds
/// it), let go of the dependencies of an operation that finished without running, or nothing.
private enum StartStep {
    case run(Engine<OperationKey>?, AnyWork<OperationKey>?)
    case finishedWithoutRunning
    case none
}

// MARK: - The work an operation runs

// Beside `finish`, `cancel` and `report`, which call it (as does the deprecated `coalesce`): a result
// then goes from this file to the engine, and from the engine to the steps in
// OperationLifecycle.swift, never back to a file it left.

extension ConcurrentOperation {
    /// The work this operation runs, in the engine that holds it. An operation that no manager
    /// holds adopts one the first time it needs it (to finish, to be cancelled, to absorb another
    /// by hand), in an engine shared by all such operations that indexes none of them: its result
    /// then takes the same path as any other. Nil for an operation that rides on other work or
    /// whose result is decided.
    @usableFromInline final func ownWork() -> (Engine<OperationKey>, Work<OperationKey, Value>)? {
        // Read before locking, and only for an operation that must adopt work: the getters are
        // overridable, and no user code runs under a lock.
        var adopting: (policy: AbandonedWorkPolicy, floor: OperationPriority)?
        if case .own? = lifecycle.withLock({ $0.link }) {
            adopting = (
                (self as? CoalescibleOperation<Value>)?.abandonedWorkPolicy ?? .cancel, OperationPriority(of: self)
            )
        }
        return lifecycle.withLock { lifecycle in
            guard let link = lifecycle.link else { return nil }
            guard case .own(let own) = link, let (policy, floor) = adopting else {
                // Adopted since it was read: a link never goes back to `.own`.
                if case .work(let engine, let work, _) = link { return (engine, work) }
                preconditionFailure("ConcurrentOperation: work adopted and dropped")
            }
            let work = Work(adopting: self, caller: own, policy: policy, floor: floor)
            let adopted = Lifecycle<Value>.Link.work(unmanaged, work, slot: own == nil ? nil : 0)
            if case .idle(_, let onQueue) = lifecycle {
                lifecycle = .idle(adopted, onQueue: onQueue)
            } else {
                work.isPriorityFrozen = true
                lifecycle = .executing(adopted)
            }
            return (unmanaged, work)
        }
    }
}

extension Lifecycle {
    /// Where the result is decided, while it is not yet: the operation is idle or executing.
    @usableFromInline var link: Link? {
        switch self {
        case .idle(let link, _), .executing(let link): link
        case .riding, .decidedBeforeStart, .finished: nil
        }
    }
}

/// The engine of the operations no manager holds: on a queue of the app's, or coalesced by hand.
/// It indexes nothing, so nothing ever joins their work by identifier.
let unmanaged = Engine<OperationKey>(observer: nil, stallThreshold: nil)

extension Work where Key == OperationKey {
    /// Work for an operation no manager holds: not indexed, its own caller the only one.
    convenience init(
        adopting operation: ConcurrentOperation<Value>, caller: Caller<Value>?, policy: AbandonedWorkPolicy,
        floor: OperationPriority
    ) {
        let identifier = (operation as? CoalescibleOperation<Value>)?.identifier ?? ""
        self.init(
            key: OperationKey(identifier: identifier, valueType: Value.self), runner: .operation(operation),
            policy: policy, floor: Urgency(floor), timed: false)
        isIndexed = false
        if let caller {
            // Not shared yet: no lock is needed to give it its first caller.
            _ = callers.add(caller)
            live = caller.waits ? 1 : 0
            arrivals = live
        }
    }
}
