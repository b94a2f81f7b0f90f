import Foundation

/// An operation that can absorb identical operations, so that their work runs once and its one
/// result reaches every caller.
///
/// Subclass it once per kind of work, give identical requests the same ``identifier``, and enqueue
/// instances through an ``OperationQueueManager``: while one is pending or running, the manager
/// folds every further operation with the same identifier and `Value` type into it.
///
/// ```swift
/// final class UserFetchOperation: CoalescibleOperation<User> {
///     init(completionHandler: @escaping (Result<User, Error>) -> Void) {
///         super.init(identifier: "UserFetchOperation", completionHandler: completionHandler)
///     }
///
///     override func main() {
///         api.fetchUser { self.finish(result: $0) }
///     }
/// }
/// ```
///
/// ## Callers
/// Each operation brings one caller: its completion handler and its ``ConcurrentOperation/callBackQueue``. An absorbed
/// operation never runs; when the work ends it finishes with the same result, and its handler runs
/// on its own queue. Callers are kept in a flat list, so joining costs the same for the millionth
/// caller as for the second, and handing out the result never nests closures.
///
/// ## Cancellation
/// - Cancelling an **absorbed** operation withdraws its caller only: that caller receives one
///   `.failure(ConcurrentOperationError.cancelled)`, the others still receive the result.
/// - Cancelling the operation that **runs the work** cancels it for every caller. To withdraw that
///   operation's own caller only, use the ``CoalescingHandle`` that
///   ``OperationQueueManager/enqueue(operation:)`` returns.
/// - When every caller has withdrawn, the work is cancelled.
///
/// - Important: The default ``ConcurrentOperation/callBackQueue`` is `OperationQueue.current ?? .main`. On a plain
///   thread or a dispatch queue that is `.main`, which a command-line program or a server only
///   services while its main thread runs `RunLoop.main.run()` or `dispatchMain()`. Pass a queue of
///   your own there.
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
    public init(
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
    /// ``OperationQueueManager/value(of:isolation:)`` or
    /// ``OperationQueueManager/enqueue(identifier:callBackQueue:makeOperation:completionHandler:)``,
    /// or for work nobody waits for, such as warming a cache.
    ///
    /// - Parameter identifier: Equal for operations that do the same work; see ``identifier``.
    public init(identifier: String) {
        self.identifier = identifier
        super.init(callBackQueue: nil, completionHandler: nil)
    }

    /// Folds `operation` into this one: its caller will receive this operation's result, and its
    /// own work will never run.
    ///
    /// Refused, with no effect, when this operation's result is already decided (it finished or
    /// was cancelled) or it is itself absorbed, and when `operation` is not fresh: already
    /// enqueued, absorbed, started, finished or cancelled, or it has absorbed others itself.
    /// ``OperationQueueManager`` calls this for you; call it yourself only to coalesce by hand.
    ///
    /// - Parameter operation: An operation with the same `Value` type, usually the same identifier.
    /// - Returns: True if `operation` now rides on this operation's work.
    @discardableResult
    public final func coalesce(operation: CoalescibleOperation<Value>) -> Bool {
        if case .absorbed = absorb(operation, priority: nil) {
            return true
        }
        return false
    }

    override func enqueue(on manager: OperationQueueManager) {
        manager.enqueue(operation: self)
    }
}
