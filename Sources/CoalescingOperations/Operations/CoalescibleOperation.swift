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
    @inlinable
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
    /// ``OperationQueueManager/value(of:timeout:isolation:)`` or
    /// ``OperationQueueManager/enqueue(identifier:callBackQueue:priority:timeout:makeOperation:completionHandler:)``,
    /// or for work nobody waits for, such as warming a cache.
    ///
    /// - Parameter identifier: Equal for operations that do the same work; see ``identifier``.
    @inlinable
    public init(identifier: String) {
        self.identifier = identifier
        super.init(callBackQueue: nil, completionHandler: nil)
    }

    /// What happens to the work when its last caller withdraws or times out: cancelled (the
    /// default), or run to completion with nobody waiting.
    ///
    /// Override it for work whose effect matters even when nobody waits for the answer: a write,
    /// an upload, a cache warm-up. Read, with no lock held, each time a caller withdraws.
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
            if !setOwnPriority({ $0.queuePriority = newValue }) {
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
            if !setOwnPriority({ $0.qualityOfService = newValue }) {
                super.qualityOfService = newValue
            }
        }
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
        if case .absorbed = absorb(operation, priority: nil, events: nil) {
            return true
        }
        return false
    }

    // MARK: Joining

    /// Outcomes of ``absorb(_:priority:events:)``.
    @usableFromInline
    enum Absorption {
        /// The operation now rides on this one, among `callers`; `applyPriority` asks the calling
        /// thread to call ``applyPriority()``.
        case absorbed(callers: Int, applyPriority: Bool)
        /// The operation cannot ride on anything: it is queued, absorbed, started or decided.
        case operationUnavailable
        /// The operation is fresh but carries operations it absorbed by hand: it must run its own
        /// work, because settling never nests more than one level.
        case operationCarriesOthers
        /// This operation takes no more callers: its result is decided, or it rides on another.
        case hostUnavailable
    }

    /// Makes `operation` ride on this operation's work, atomically with respect to both.
    ///
    /// - Parameters:
    ///   - operation: The operation to absorb; it must be fresh.
    ///   - priority: The joining caller's priority, which the work follows while it waits.
    ///   - events: The manager's observer, told of the join under this operation's lock so that
    ///     events keep the order of the changes.
    /// - Returns: Whether `operation` was absorbed, or which of the two was unavailable.
    @inlinable
    final func absorb(
        _ operation: CoalescibleOperation<Value>, priority: OperationPriority?, events: EventChannel<String>?
    ) -> Absorption {
        guard operation !== self else { return .operationUnavailable }
        return withBothStates(self, operation) { host, absorbed in
            switch absorbed.freshness {
            case .unavailable: return .operationUnavailable
            case .carriesOthers: return .operationCarriesOthers
            case .fresh: break
            }
            guard
                case .joined(let slot, let callers, let applyPriority) = host.join(
                    .operation(operation), priority: priority)
            else { return .hostUnavailable }
            absorbed.becomeAbsorbed(by: self, slot: slot)
            events?.record(.callerJoined(key: identifier, callers: callers))
            return .absorbed(callers: callers, applyPriority: applyPriority)
        }
    }

    /// Adds a handler to this operation's work, unless its result is already decided; the
    /// manager's join path, inlined into the caller so that it is specialized for its `Value`.
    @inlinable
    final func join(
        _ caller: Caller<Value>, priority: OperationPriority?, events: EventChannel<String>?
    ) -> OperationState<Value>.JoinAction {
        state.withLock { state in
            let action = state.join(caller, priority: priority)
            if let events, case .joined(_, let callers, _) = action {
                events.record(.callerJoined(key: identifier, callers: callers))
            }
            return action
        }
    }

    /// Claims the operation for a manager's queue. False if it is not fresh.
    final func claim(_ admission: Admission, events: EventChannel<String>?) -> Bool {
        state.withLock { state in
            guard state.claim(admission) else { return false }
            events?.record(.workStarted(key: identifier))
            return true
        }
    }

    // MARK: Withdrawing

    /// Withdraws the caller in `slot` for `reason`: it receives its error, unless the result is
    /// already on its way, and the work follows ``abandonedWorkPolicy`` if nobody else waits.
    ///
    /// - Parameters:
    ///   - slot: The caller's slot; nil stands for an operation with no caller of its own.
    ///   - reason: Why the caller leaves; it decides the error the caller receives.
    ///   - tellingCaller: False when the caller is an absorbed operation that already decided its
    ///     own result and is leaving by itself.
    @usableFromInline
    final func withdraw(_ slot: Int?, reason: WithdrawalReason, tellingCaller: Bool = true) {
        let policy = abandonedWorkPolicy
        let (action, registration) = state.withLock { state in
            let registration = state.registration
            let action = state.withdraw(slot, reason: reason, policy: policy)
            if action.removedCaller, let registration, let events = registration.manager.events {
                events.record(.callerWithdrawn(key: identifier, reason: reason))
            }
            return (action, registration)
        }
        if action.removedCaller {
            registration?.manager.callerWithdrawn(reason)
        }
        let error: Error = reason == .timedOut ? CoalescingError.timedOut : ConcurrentOperationError.cancelled
        switch action {
        case .none:
            break
        case .withdrew(let caller, let applyPriority):
            if tellingCaller, let caller { Self.tell(caller, error) }
            if applyPriority { self.applyPriority() }
        case .abandoned(let caller, let settlement):
            // The work's result is decided; `cancel()` now only lets an override stop the work and
            // Foundation see `isCancelled`, before anyone hears of the withdrawal or the end.
            cancel()
            if tellingCaller, let caller { Self.tell(caller, error) }
            settle(settlement, with: .failure(ConcurrentOperationError.cancelled))
        case .leftHost(let caller, let settlement):
            if tellingCaller, let caller { Self.tell(caller, error) }
            settle(settlement, with: .failure(error), leaving: reason)
        }
    }

    // MARK: Priority

    /// Changes the priority the caller in `slot` asks for; for an absorbed operation's caller, the
    /// priority its operation asks of the work it rides on.
    final func reprioritize(_ slot: Int?, to priority: OperationPriority?) {
        let (mustApply, host) = state.withLock { state in
            (slot.map { state.reprioritize($0, to: priority) } ?? false, state.host)
        }
        if let host {
            host.operation.reprioritize(host.slot, to: priority)
        } else if mustApply {
            applyPriority()
        }
    }

    /// Writes the work's priority to Foundation until it matches what its callers ask for; called
    /// by the one thread that holds the right to (see ``PriorityTracker``).
    @usableFromInline
    final func applyPriority() {
        var events: EventChannel<String>?
        while let priority = state.withLock({ state -> OperationPriority? in
            events = state.registration?.manager.events
            let next = state.nextPriorityToApply()
            if let next {
                events?.record(.priorityChanged(key: identifier, priority: .operation(next)))
            }
            return next
        }) {
            super.queuePriority = priority.queuePriority
            super.qualityOfService = priority.qualityOfService
        }
        events?.drain()
    }

    /// Sets the operation's own priority, the floor under its callers'. False if no manager
    /// tracks its priority, so that the setter writes straight to Foundation.
    private final func setOwnPriority(_ change: (inout OperationPriority) -> Void) -> Bool {
        guard let mustApply = state.withLock({ $0.setOwnPriority(change) }) else { return false }
        if mustApply {
            applyPriority()
        }
        return true
    }
}

/// Runs `body` holding the locks of two distinct operations, always taken in the same (address)
/// order, so that two threads absorbing the pair in opposite directions cannot deadlock.
@inlinable
func withBothStates<Value, Result>(
    _ first: CoalescibleOperation<Value>,
    _ second: CoalescibleOperation<Value>,
    _ body: (inout OperationState<Value>, inout OperationState<Value>) -> Result
) -> Result {
    if ObjectIdentifier(first) < ObjectIdentifier(second) {
        first.state.withLock { a in second.state.withLock { b in body(&a, &b) } }
    } else {
        second.state.withLock { b in first.state.withLock { a in body(&a, &b) } }
    }
}
