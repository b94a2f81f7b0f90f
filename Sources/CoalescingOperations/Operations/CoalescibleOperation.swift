import Foundation

/// An operation that can absorb identical operations, so that their work runs once and its one
/// result reaches every caller.
///
/// Subclass it once per kind of work, give identical requests the same ``identifier``, and enqueue
/// instances through an ``OperationQueueManager``: while one is pending or running, the manager
/// folds every further operation with the same identifier and `Value` type into it.
///
/// ```swift
/// final class AvatarFetchOperation: CoalescibleOperation<Data>, @unchecked Sendable {
///     // @unchecked: adds only immutable properties to CoalescibleOperation's locked state.
///     let url: URL
///     let loader: ThumbnailLoader
///
///     init(url: URL, loader: ThumbnailLoader, completionHandler: @escaping (Result<Data, Error>) -> Void) {
///         self.url = url
///         self.loader = loader
///         super.init(identifier: url.absoluteString, callBackQueue: .main, completionHandler: completionHandler)
///     }
///
///     override func main() {
///         loader.load(url) { self.finish(result: $0) }
///     }
/// }
/// ```
///
/// ## Callers
/// Each operation brings one caller: its completion handler and its
/// ``ConcurrentOperation/callBackQueue``. An absorbed operation never runs; when the work ends it
/// finishes with the same result, and its handler runs on its own queue. Callers are kept in a
/// flat list, so joining costs the same for the millionth caller as for the second, and handing
/// out the result never nests closures.
///
/// ## Cancellation
/// - Cancelling an **absorbed** operation withdraws its caller only: that caller receives one
///   `.failure(ConcurrentOperationError.cancelled)`, the others still receive the result.
/// - Cancelling the operation that **runs the work** cancels it for every caller. To withdraw that
///   operation's own caller only, use the ``CoalescingHandle`` that
///   ``OperationQueueManager/enqueue(operation:timeout:)`` returns.
/// - When every caller has withdrawn, the work is cancelled, or runs on if its
///   ``abandonedWorkPolicy`` says so.
///
/// ## Priority
/// While the work waits on its queue, its `queuePriority` and `qualityOfService` follow its
/// callers: each knob is the most urgent among the callers still waiting, and never below what the
/// app set on the operation itself. A caller that withdraws or times out takes its urgency with it.
///
/// - Important: The default ``ConcurrentOperation/callBackQueue`` is `OperationQueue.current ??
///   .main`. On a plain thread or a dispatch queue that is `.main`, which a command-line program or
///   a server only services while its main thread runs `RunLoop.main.run()` or `dispatchMain()`.
///   Pass a queue of your own there.
open class CoalescibleOperation<Value>: ConcurrentOperation<Value>, @unchecked Sendable {
    // @unchecked: adds only an immutable identifier to `ConcurrentOperation`'s lock-guarded state.

    /// Operations with equal identifiers and the same `Value` type do the same work.
    ///
    /// Include everything that makes a request distinct: `"questions?page=2&sort=votes"`, not
    /// `"questions"`.
    public let identifier: String

    /// Creates an operation whose caller is `completionHandler`, called on `callBackQueue`.
    ///
    /// - Parameters:
    ///   - identifier: Equal for operations that do the same work; see ``identifier``.
    ///   - callBackQueue: Where `completionHandler` runs. Defaults to the queue creating the
    ///     operation, or `.main` when there is none (see the note on ``CoalescibleOperation``).
    ///   - completionHandler: Called exactly once: with the shared result, or with
    ///     `.failure(ConcurrentOperationError.cancelled)` if the work is cancelled or this caller
    ///     withdraws first.
    @inlinable public init(
        identifier: String,
        callBackQueue: OperationQueue = OperationQueue.current ?? .main,
        completionHandler: @escaping (Result<Value, Error>) -> Void
    ) {
        self.identifier = identifier
        super.init(callBackQueue: callBackQueue, completionHandler: completionHandler)
    }

    /// Creates an operation with no caller of its own.
    ///
    /// Use it for work whose callers come through
    /// ``OperationQueueManager/value(of:timeout:isolation:)`` or
    /// ``OperationQueueManager/enqueue(identifier:callBackQueue:priority:timeout:makeOperation:completionHandler:)``,
    /// or for work nobody waits for, such as warming a cache.
    ///
    /// - Parameter identifier: Equal for operations that do the same work; see ``identifier``.
    @inlinable public init(identifier: String) {
        self.identifier = identifier
        super.init(callBackQueue: nil, completionHandler: nil)
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
            if !setFloor({ $0.queuePriority = newValue }) {
                super.queuePriority = newValue
            }
        }
    }

    /// The class of the thread the operation runs on.
    ///
    /// While a manager holds the work waiting, setting it sets the operation's own priority: the
    /// floor under its callers' urgency. Reading it gives the priority in force.
    open override var qualityOfService: QualityOfService {
        get { super.qualityOfService }
        set {
            if !setFloor({ $0.qualityOfService = newValue }) {
                super.qualityOfService = newValue
            }
        }
    }

    /// Sets the floor under the callers' priorities while the work waits on its queue; false if
    /// the operation runs no work an engine holds waiting, so that the setter writes through.
    private final func setFloor(_ change: (inout OperationPriority) -> Void) -> Bool {
        guard case .idle(.work(let engine, let work, _), _) = lifecycle.withLock({ $0 }) else { return false }
        engine.setFloor(of: work, change)
        return true
    }

    /// Folds `operation` into this one: its caller will receive this operation's result, and its
    /// own work will never run.
    ///
    /// Refused, with no effect, when this operation's result is already decided (it finished or
    /// was cancelled) or it is itself absorbed, and when `operation` is not fresh: already
    /// enqueued, absorbed, started, finished or cancelled, or it has absorbed others itself.
    ///
    /// - Parameter operation: An operation with the same `Value` type, usually the same identifier.
    /// - Returns: True if `operation` now rides on this operation's work.
    @discardableResult public final func coalesce(operation: CoalescibleOperation<Value>) -> Bool {
        guard operation !== self, let (engine, work) = ownWork(), work.isInFlight else { return false }
        let priority = OperationPriority(of: operation)
        let joined = engine.state.withLock { operation.ride(on: work, of: engine, in: &$0, priority: priority) }
        if joined?.raised == true {
            engine.applyPriority(of: work)
        }
        engine.deliverEvents()
        return joined != nil
    }

    /// The work this operation runs or rides on, in the engine that holds it, while in flight.
    @usableFromInline final var work: (Engine<OperationKey>, Work<OperationKey, Value>)? {
        switch lifecycle.withLock({ $0 }) {
        case .idle(.work(let engine, let work, _), _), .executing(.work(let engine, let work, _)),
            .riding(let engine, let work, _, _):
            (engine, work)
        case .idle(.own, _), .executing(.own), .decidedBeforeStart, .finished:
            nil
        }
    }
}
