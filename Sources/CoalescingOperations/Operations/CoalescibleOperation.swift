import Foundation

/// An operation whose identical copies join one run of the work, so that its one result reaches
/// every caller.
///
/// Subclass it once per kind of work, give identical requests the same ``identifier``, and enqueue
/// instances through an ``OperationQueueManager``: while one is pending or running, every further
/// operation with the same identifier and `Value` type joins its work instead of running.
///
/// ```swift
/// final class AvatarFetchOperation: CoalescibleOperation<Data>, @unchecked Sendable {
///     let url: URL
///     let loader: ThumbnailLoader
///
///     init(url: URL, loader: ThumbnailLoader, completionHandler: (@Sendable (Result<Data, Error>) -> Void)? = nil) {
///         self.url = url
///         self.loader = loader
///         super.init(identifier: url.absoluteString, completionHandler: completionHandler)
///     }
///
///     override func main() {
///         loader.load(url) { self.finish(result: $0) }
///     }
/// }
/// ```
///
/// One initialiser serves every caller: with a handler, for
/// ``OperationQueueManager/enqueue(operation:timeout:progress:)``; without one, for
/// ``OperationQueueManager/value(of:timeout:progress:isolation:)`` and the `identifier:` forms. Why the
/// subclass restates `@unchecked Sendable` is in ``ConcurrentOperation``.
///
/// ## Callers
/// Each operation brings at most one caller: its completion handler and its
/// ``ConcurrentOperation/callBackQueue``. An operation that joined other work never runs; when the
/// work ends it finishes with the same result, and its handler runs on its own queue. Callers are
/// kept in a flat list, so joining costs the same for the millionth caller as for the second, and
/// handing out the result never nests closures.
///
/// ## Cancellation
/// - Cancelling an operation that **joined** other work withdraws its caller only: that caller
///   receives one `.failure(CancellationError())`, the others still receive the result.
/// - Cancelling the operation that **runs the work** cancels it for every caller, who receive
///   `.failure(CoalescingError.cancelled)`. To withdraw that operation's own caller only, use the
///   ``CoalescingHandle`` that ``OperationQueueManager/enqueue(operation:timeout:progress:)`` returns.
/// - When every caller has withdrawn, the work is cancelled, or runs on if its
///   ``abandonedWorkPolicy`` says so.
///
/// ## Priority
/// While the work waits on its queue, its `queuePriority` and `qualityOfService` follow its
/// callers: each knob is the most urgent among the callers still waiting, and never below what the
/// app set on the operation itself. A caller that withdraws or times out takes its urgency with it.
open class CoalescibleOperation<Value: Sendable>: ConcurrentOperation<Value>, @unchecked Sendable {
    // @unchecked: adds an immutable identifier, and `link`, guarded by `lifecycle`'s lock.

    /// Operations with equal identifiers and the same `Value` type do the same work.
    ///
    /// Include everything that makes a request distinct: `"questions?page=2&sort=votes"`, not
    /// `"questions"`.
    public let identifier: String

    /// Where the operation's result is decided. Read and written only under `lifecycle`'s lock,
    /// the operation's one lock: a manager takes it inside its engine's lock, and no path nests
    /// more than those two.
    @usableFromInline @exclusivity(unchecked) final var link = Link.fresh

    /// The link, read under the operation's lock.
    @usableFromInline final var linked: Link { lifecycle.withLock { _ in link } }

    /// Creates an operation whose caller, if any, is `completionHandler`, called on
    /// `callBackQueue`.
    ///
    /// - Parameters:
    ///   - identifier: Equal for operations that do the same work; see ``identifier``.
    ///   - callBackQueue: Where `completionHandler` runs; nil, the default, runs it on the thread
    ///     that finishes the work, with no queue hop.
    ///   - completionHandler: Called exactly once with the shared result, or a failure (see
    ///     ``CoalescingError``). Nil, the default, for work whose callers come through the
    ///     manager's `value` or `identifier:` methods, or for work nobody waits for, such as
    ///     warming a cache.
    @inlinable public init(
        identifier: String,
        callBackQueue: OperationQueue? = nil,
        completionHandler: (@Sendable (Result<Value, Error>) -> Void)? = nil
    ) {
        self.identifier = identifier
        super.init(callBackQueue: callBackQueue, completionHandler: completionHandler)
    }

    /// What happens to the work when its last caller withdraws or times out: cancelled (the
    /// default), or run to completion with nobody waiting.
    ///
    /// Override it for work whose effect matters even when nobody waits for the answer: a write,
    /// an upload, a cache warm-up. Read once, with no lock held, when the operation is enqueued to
    /// start the work.
    ///
    /// ```swift
    /// final class AvatarUpload: CoalescibleOperation<URL>, @unchecked Sendable {
    ///     override var abandonedWorkPolicy: AbandonedWorkPolicy { .runToCompletion }
    ///     // …
    /// }
    /// ```
    open var abandonedWorkPolicy: AbandonedWorkPolicy { .cancel }

    /// The operation's place among the operations waiting on its queue.
    ///
    /// While a manager holds the work waiting, setting it sets the operation's own priority: the
    /// floor under its callers' urgency. Reading it gives the priority in force.
    open override var queuePriority: Operation.QueuePriority {
        get { super.queuePriority }
        set {
            setFloor({ $0.queuePriority = newValue }, otherwise: { super.queuePriority = newValue })
        }
    }

    /// The class of the thread the operation runs on.
    ///
    /// While a manager holds the work waiting, setting it sets the operation's own priority: the
    /// floor under its callers' urgency. Reading it gives the priority in force.
    open override var qualityOfService: QualityOfService {
        get { super.qualityOfService }
        set {
            setFloor({ $0.qualityOfService = newValue }, otherwise: { super.qualityOfService = newValue })
        }
    }

    /// Sets the floor under the callers' priorities while the work waits on its queue, or else
    /// writes through (`otherwise`) when the operation runs no work an engine holds waiting.
    private final func setFloor(_ change: (inout OperationPriority) -> Void, otherwise writeThrough: () -> Void) {
        let held = lifecycle.withLock { lifecycle -> (Engine<OperationKey>, Work<OperationKey, Value>)? in
            guard case .runs(let engine, let work) = link, case .idle = lifecycle else { return nil }
            return (engine, work)
        }
        guard let (engine, work) = held else { return writeThrough() }
        engine.setFloor(of: work, change)
    }

    // Inlinable: finishing an operation of a final subclass is then specialized in the caller's
    // module, and so is handing the result to every caller (fan-out ~50 Ir a caller cheaper).
    @inlinable override final func end(with result: Result<Value, Error>, cancelling: Bool) {
        let taken = lifecycle.withLock { _ -> Link in
            let taken = link
            // Nobody took it: a plain operation from now on, which no manager may take.
            if case .fresh = taken { link = .alone }
            return taken
        }
        switch taken {
        case .fresh, .alone:
            super.end(with: result, cancelling: cancelling)
        case .runs(let engine, let work):
            // Decided before Foundation hears of a cancellation, for the reason `super.end(with:cancelling:)` gives.
            let decision = engine.decide(work, with: result)
            if cancelling { cancelInFoundation() }
            engine.carryOut(decision, of: work, with: result)
        case .joined(let engine, let work, let slot):
            if cancelling { cancelInFoundation() }
            // Cancelled, its caller withdraws; finished by hand, it hears its own result (Guarantee 5).
            engine.withdraw(work, slot: slot, reason: .withdrawn, hearing: cancelling ? nil : result)
        case .ended:
            if cancelling { cancelInFoundation() }
        }
    }

    override final func willRun() -> Bool {
        switch linked {
        case .runs(let engine, let work): engine.begin(work)
        case .joined, .ended: false
        case .fresh, .alone: true
        }
    }

    override final func reported(_ progress: WorkProgress) {
        if case .runs(let engine, let work) = linked { engine.report(progress, for: work) }
    }
}
