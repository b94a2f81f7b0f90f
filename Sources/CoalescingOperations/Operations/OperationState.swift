import Foundation

/// The one state machine behind every ``ConcurrentOperation``: its lifecycle as Foundation sees
/// it, and the callers waiting for its result.
///
/// Two things are tracked apart, because Foundation forbids tying them together:
/// - the **result** is decided once (`isResolved`), by `finish(result:)`, `cancel()` or the last
///   caller withdrawing, and is handed to the callers at that moment; the operation is *settled*
///   once every caller, absorbed operations included, has been given it;
/// - the **lifecycle** (`phase`) reaches `.finished` only once the operation is settled *and* the
///   queue has called `start()`: an operation that reports finished before its queue started it
///   corrupts the queue, and one that reports finished before its absorbed operations would let
///   `waitUntilAllOperationsAreFinished()` return too early. Whichever of `start()` and settling
///   comes last moves it to `.finished`.
///
/// Every method here is pure bookkeeping, run under the operation's lock; the operation performs
/// the effects (KVO, delivery, manager callbacks) afterwards, with no lock held. What joining and
/// finishing touch is inlinable, so that those paths are specialized for the caller's `Value`.
@usableFromInline
struct OperationState<Value> {
    @usableFromInline
    enum Phase {
        /// Created; not claimed by a manager and not started.
        case idle
        /// Admitted by an ``OperationQueueManager`` and waiting for its queue to start it.
        case enqueued
        /// Riding on another operation's work: it never runs, and finishes when it is served.
        case absorbed
        /// Started by its queue (or by hand) and not finished yet.
        case executing
        /// Done, as far as Foundation is concerned.
        case finished
    }

    /// What `start()` must do.
    @usableFromInline
    enum StartAction {
        /// Call `main()`.
        case run
        /// The result was decided and handed out before the queue started the operation: the
        /// operation is now finished.
        case finishWithoutRunning
        /// Already started, absorbed or finished, or still handing out a result decided before the
        /// start (settling then finishes it): nothing to do.
        case ignore
    }

    /// What the winner of `resolve()` must hand out after releasing the lock.
    @usableFromInline
    struct Resolution {
        @usableFromInline var callers: ContiguousArray<Subscriber<Value>?>
        /// The one queue every caller shares, if they do.
        @usableFromInline var callerQueues: CallerQueues
        @usableFromInline var registration: Registration?

        @inlinable
        init(callers: ContiguousArray<Subscriber<Value>?>, callerQueues: CallerQueues, registration: Registration?) {
            self.callers = callers
            self.callerQueues = callerQueues
            self.registration = registration
        }
    }

    /// How a manager finds the index entry that this operation fills.
    ///
    /// The reference is strong, and dropped when the result is decided: work in flight keeps its
    /// manager alive. (A weak reference costs every enqueue and every retain of the manager a trip
    /// through its side table: a quarter more time for work that never coalesces.)
    @usableFromInline
    struct Registration {
        let manager: OperationQueueManager
        let key: OperationKey
    }

    @usableFromInline var phase = Phase.idle
    @usableFromInline var isResolved = false
    /// Every caller has been given the result.
    private var isSettled = false
    @usableFromInline var callers: ContiguousArray<Subscriber<Value>?> = []
    /// Non-nil entries of `callers`; withdrawing leaves a hole so that slots stay valid.
    @usableFromInline var liveCallers = 0
    /// Lets a result reach callers who all share one queue as a whole list, in one hop.
    @usableFromInline var callerQueues = CallerQueues.none
    /// Absorbed operations may not absorb others, so delivery never nests more than one level.
    private(set) var hasAbsorbed = false
    /// The operation this one rode on, and its slot there, while absorbed.
    @usableFromInline var host: (operation: ConcurrentOperation<Value>, slot: Int)?
    @usableFromInline var registration: Registration?
    private var priority: PriorityRequests?

    @usableFromInline
    init(caller: Subscriber<Value>?) {
        if let caller {
            _ = append(caller)
        }
    }

    // MARK: Lifecycle

    /// Claims an idle operation for a queue, so that it is never added to a second one.
    mutating func claim(registration: Registration?, priority: OperationPriority?) -> Bool {
        guard phase == .idle, !isResolved else { return false }
        phase = .enqueued
        self.registration = registration
        // The thread that admitted the operation applies raised priorities once it is queued.
        self.priority = priority.map { PriorityRequests(current: $0, isApplying: true) }
        return true
    }

    mutating func begin() -> StartAction {
        guard phase == .idle || phase == .enqueued else { return .ignore }
        if isSettled {
            phase = .finished
            return .finishWithoutRunning
        }
        phase = .executing
        return isResolved ? .ignore : .run
    }

    /// Decides the result. Only the first call wins; it takes every caller still waiting.
    @inlinable
    mutating func resolve() -> Resolution? {
        guard !isResolved else { return nil }
        isResolved = true
        let resolution = Resolution(callers: callers, callerQueues: callerQueues, registration: registration)
        callers = []
        liveCallers = 0
        callerQueues = .none
        registration = nil
        host = nil  // So that an absorbed operation and its host do not keep each other alive.
        return resolution
    }

    /// Records that the winner of `resolve()` has handed out the result. Returns the lifecycle
    /// keys to post while it moves the operation to `.finished` (see `markFinished()`), or nil
    /// when `start()` has not run yet and will finish it.
    @usableFromInline
    mutating func settle() -> [String]? {
        isSettled = true
        return switch phase {
        case .executing: LifecycleKey.executingAndFinished
        case .absorbed: LifecycleKey.finishedOnly
        case .idle, .enqueued, .finished: nil
        }
    }

    /// Called after `settle()` returned keys, between their KVO `willChange` and `didChange`.
    @usableFromInline
    mutating func markFinished() {
        phase = .finished
    }

    // MARK: Callers

    /// Whether more callers may still join this operation's work.
    @inlinable
    var acceptsCallers: Bool {
        !isResolved
    }

    /// Whether other operations may ride on this one's work: not if it rides on another itself,
    /// so that delivery never nests more than one level.
    var canAbsorb: Bool {
        !isResolved && phase != .absorbed
    }

    /// Adds a caller; returns its slot, or nil when the work is already decided.
    @inlinable
    mutating func subscribe(_ caller: Subscriber<Value>) -> Int? {
        guard acceptsCallers else { return nil }
        return append(caller)
    }

    @inlinable
    mutating func append(_ caller: Subscriber<Value>) -> Int {
        if case .handler(_, let queue) = caller {
            callerQueues.add(queue)
        } else {
            callerQueues = .several
        }
        if callers.count == 1 {
            // Work that one caller joins often draws a crowd: grow once, not at every doubling.
            callers.reserveCapacity(16)
        }
        callers.append(caller)
        liveCallers += 1
        return callers.count - 1
    }

    /// Whether this operation is untouched: not enqueued, absorbed or started, its result open.
    /// A fresh operation may ride on another's work unless it ``hasAbsorbed`` others itself.
    var isFresh: Bool {
        phase == .idle && !isResolved
    }

    /// Records that this operation now rides on `host`, in `slot`. Check `isFresh` and
    /// `hasAbsorbed` first.
    mutating func becomeAbsorbed(by host: ConcurrentOperation<Value>, slot: Int) {
        phase = .absorbed
        self.host = (host, slot)
    }

    /// Adds an absorbed operation as a caller. Check `canAbsorb` first.
    mutating func absorb(_ operation: ConcurrentOperation<Value>) -> Int {
        hasAbsorbed = true
        return append(.operation(operation))
    }

    /// Removes the caller in `slot`, if it is still waiting.
    ///
    /// - Returns: The removed caller, which is owed a `.cancelled`; and whether the work is now
    ///   wanted by nobody and should be cancelled. A nil `slot` stands for an operation enqueued
    ///   with no caller of its own: withdrawing it only abandons work that nobody else joined.
    mutating func withdraw(slot: Int?) -> (removed: Subscriber<Value>?, abandoned: Bool) {
        guard !isResolved else { return (nil, false) }
        guard let slot else { return (nil, liveCallers == 0) }
        guard callers.indices.contains(slot), let removed = callers[slot] else { return (nil, false) }
        callers[slot] = nil
        liveCallers -= 1
        return (removed, liveCallers == 0)
    }

    // MARK: Priority

    /// Records a joining caller's priority. Returns true when the caller must apply it
    /// (see `ConcurrentOperation.applyRequestedPriority()`), because no other thread is.
    mutating func request(_ wanted: OperationPriority) -> Bool {
        guard phase == .enqueued, var priority else { return false }
        let raised = priority.requested.raised(to: wanted)
        guard raised != priority.requested else { return false }
        priority.requested = raised
        let mustApply = !priority.isApplying
        priority.isApplying = true
        self.priority = priority
        return mustApply
    }

    /// The next priority to write to Foundation, or nil (and the applying thread released) when
    /// everything requested has been written.
    mutating func nextPriorityToApply() -> OperationPriority? {
        guard var priority else { return nil }
        defer { self.priority = priority }
        guard priority.applied != priority.requested else {
            priority.isApplying = false
            return nil
        }
        priority.applied = priority.requested
        return priority.applied
    }
}
