import Foundation

/// The one state machine behind every operation: its callers while the result is open, and its
/// lifecycle as Foundation sees it once the result is decided.
///
/// Two things happen apart, because Foundation forbids tying them together:
/// - the **result** is decided once (by `finish(result:)`, `cancel()` or the last caller
///   withdrawing), and at that moment the callers are taken out to be settled;
/// - the **lifecycle** reaches `.finished` only once every caller has been handed the result *and*
///   the queue has called `start()`: an operation that reports finished before its queue started it
///   corrupts the queue, and one that reports finished before the operations it absorbed would let
///   `waitUntilAllOperationsAreFinished()` return too early.
///
/// Each case carries the data valid in it and nothing else. Each transition runs under the
/// operation's lock, is pure bookkeeping, and returns an action that the operation carries out
/// after releasing the lock (KVO, delivery, telling the manager); a transition that cannot happen
/// stops with a message. What joining and settling touch is inlinable, so that those paths are
/// specialized for the caller's `Value`.
@usableFromInline
enum OperationState<Value> {
    /// The result is open and nothing started the operation. `admission` is set once a manager or
    /// a queue claimed it, so that it is never added twice.
    case pending(Callers<Value>, admission: Admission?)
    /// The result is open and the work runs.
    case executing(Callers<Value>, admission: Admission?)
    /// The result is open and this operation rides on `host`'s work, as the caller in `slot`
    /// there: it never runs, and is settled when the host is.
    case absorbed(Callers<Value>, host: CoalescibleOperation<Value>, slot: Int)
    /// The result is decided and on its way to the callers.
    case settling(Stage)
    /// Every caller has been handed the result, before the queue started the operation: `start()`
    /// finishes it without calling `main()`. `queued` says whether a queue or a manager claimed
    /// it, so that one cancelled before it was enqueued can still be handed to a queue, once.
    case settledBeforeStart(queued: Bool)
    /// Done, as far as Foundation is concerned. `leftHost` remembers why an absorbed operation
    /// left its host's work by itself, for a host that is settling at that moment and counts it.
    case finished(leftHost: WithdrawalReason?)
    /// Held only inside a transition that changes the callers in place, so that their storage has
    /// one owner and grows where it is instead of being copied at every join; never seen outside
    /// a transition. (Binding the callers out of the state and consuming it still leaves two
    /// owners: measured, every join copied the whole list.)
    case modifying

    /// Where the lifecycle stood when the result was decided.
    @usableFromInline
    enum Stage {
        /// Not started: settling leaves it to `start()` to finish the operation. `queued` as in
        /// ``OperationState/settledBeforeStart(queued:)``.
        case notStarted(queued: Bool)
        /// Started by its queue: settling moves it from executing to finished.
        case executing
        /// Absorbed: it was never started, and settling finishes it. `leaving` says why it left its
        /// host's work by itself (cancelled, or its last caller withdrew or timed out); nil when the
        /// host settled it.
        case absorbed(leaving: WithdrawalReason?)
    }

    @inlinable
    init(caller: Caller<Value>?) {
        var callers = Callers<Value>()
        if let caller {
            _ = callers.add(caller, priority: nil)
        }
        self = .pending(callers, admission: nil)
    }

    // MARK: Lifecycle

    /// What `start()` must do.
    @usableFromInline
    enum StartAction {
        /// Call `main()`.
        case run
        /// The result was handed out before the start: post the change to finished.
        case finishWithoutRunning
        /// The result was decided before the start and is still being handed out: settling
        /// finishes the operation, which never runs.
        case finishBySettling
        /// Already started, absorbed or finished.
        case none
    }

    mutating func start() -> StartAction {
        switch self {
        case .pending(let callers, let admission):
            // Priority stops mattering once the work runs.
            admission?.priority = nil
            self = .executing(callers, admission: admission)
            return .run
        case .settledBeforeStart:
            self = .finished(leftHost: nil)
            return .finishWithoutRunning
        case .settling(.notStarted):
            self = .settling(.executing)
            return .finishBySettling
        case .executing, .absorbed, .settling(.executing), .settling(.absorbed), .finished:
            return .none
        case .modifying:
            preconditionFailure("OperationState: started in the middle of a transition")
        }
    }

    var isExecuting: Bool {
        switch self {
        case .executing, .settling(.executing): true
        case .pending, .absorbed, .settling, .settledBeforeStart, .finished, .modifying: false
        }
    }

    var isFinished: Bool {
        if case .finished = self { true } else { false }
    }

    /// What the operation must do once every caller has been handed the result.
    enum SettledAction {
        /// Nothing yet: `start()` will finish the operation.
        case awaitStart
        /// Post these lifecycle keys around ``markFinished()``; first, if the operation never ran
        /// (it was absorbed), let go of its dependencies.
        case finish([String], neverRan: Bool)
    }

    /// Records that the decided result has been handed to every caller.
    mutating func settled() -> SettledAction {
        switch self {
        case .settling(.notStarted(let queued)):
            self = .settledBeforeStart(queued: queued)
            return .awaitStart
        case .settling(.executing):
            return .finish(LifecycleKey.executingAndFinished, neverRan: false)
        case .settling(.absorbed):
            return .finish(LifecycleKey.finishedOnly, neverRan: true)
        case .pending, .executing, .absorbed, .settledBeforeStart, .finished, .modifying:
            preconditionFailure("OperationState: settled while \(self.name); only a decided result settles, once")
        }
    }

    /// Called between the KVO `willChange` and `didChange` that `settled()` asked for.
    mutating func markFinished() {
        switch self {
        case .settling(.executing), .settling(.absorbed(leaving: nil)):
            self = .finished(leftHost: nil)
        case .settling(.absorbed(let leaving?)):
            self = .finished(leftHost: leaving)
        case .pending, .executing, .absorbed, .settling(.notStarted), .settledBeforeStart, .finished, .modifying:
            preconditionFailure("OperationState: marked finished while \(self.name)")
        }
    }

    // MARK: The result

    /// Decides the result: only the first call wins, and takes every caller still waiting.
    ///
    /// - Returns: What the winner must settle, or nil if the result was already decided.
    @inlinable
    mutating func decide() -> Settlement<Value>? {
        switch self {
        case .pending(let callers, let admission):
            self = .settling(.notStarted(queued: admission != nil))
            return Settlement(callers: callers, registration: admission?.registration, host: nil)
        case .executing(let callers, let admission):
            self = .settling(.executing)
            return Settlement(callers: callers, registration: admission?.registration, host: nil)
        case .absorbed(let callers, let host, let slot):
            // Dropping the host here also keeps the two from holding each other alive.
            self = .settling(.absorbed(leaving: .withdrawn))
            return Settlement(callers: callers, registration: nil, host: HostLink(operation: host, slot: slot))
        case .settling, .settledBeforeStart, .finished:
            return nil
        case .modifying:
            preconditionFailure("OperationState: decided in the middle of a transition")
        }
    }

    /// What ``decideWithHost()`` found.
    @usableFromInline
    enum HostDecision {
        /// The operation rides on the host's result: these are its callers.
        case ride(Callers<Value>)
        /// The operation already left by itself, for this reason.
        case left(WithdrawalReason)
    }

    /// Decides an absorbed operation's result as its host's: the host is settling it.
    ///
    /// - Returns: Its callers, or why it already left the host's work by itself.
    @inlinable
    mutating func decideWithHost() -> HostDecision {
        switch self {
        case .absorbed(let callers, _, _):
            self = .settling(.absorbed(leaving: nil))
            return .ride(callers)
        case .settling(.absorbed(let leaving?)), .finished(let leaving?):
            return .left(leaving)
        case .pending, .executing, .settling, .settledBeforeStart, .finished, .modifying:
            preconditionFailure("OperationState: settled by a host while \(self.name)")
        }
    }

    // MARK: Callers

    /// What ``join(_:priority:)`` did.
    @usableFromInline
    enum JoinAction {
        /// The result is decided: the caller must go elsewhere.
        case refused
        /// The caller waits in `slot`, one of `callers`; `applyPriority` asks the joining thread to
        /// write the raised priority to Foundation (see ``nextPriorityToApply()``).
        case joined(slot: Int, callers: Int, applyPriority: Bool)
    }

    /// Adds a caller, unless the result is decided.
    @inlinable
    mutating func join(_ caller: Caller<Value>, priority: OperationPriority?) -> JoinAction {
        switch self {
        case .pending(var callers, let admission):
            self = .modifying
            let slot = callers.add(caller, priority: priority)
            let applyPriority = priority.map { admission?.priority?.demand($0) ?? false } ?? false
            self = .pending(callers, admission: admission)
            return .joined(slot: slot, callers: callers.live, applyPriority: applyPriority)
        case .executing(var callers, let admission):
            self = .modifying
            let slot = callers.add(caller, priority: priority)
            self = .executing(callers, admission: admission)
            return .joined(slot: slot, callers: callers.live, applyPriority: false)
        case .absorbed, .settling, .settledBeforeStart, .finished:
            return .refused
        case .modifying:
            preconditionFailure("OperationState: joined in the middle of a transition")
        }
    }

    /// What ``withdraw(_:)`` did.
    enum WithdrawAction {
        /// Nothing: the result is already decided (the caller has it or will), or the caller had
        /// withdrawn before.
        case none
        /// The caller left (owed its error); others still wait, or the work runs on with nobody.
        case withdrew(Caller<Value>?, applyPriority: Bool)
        /// The last caller left and the work is cancelled: its result is decided, and `settlement`
        /// (with no callers) must be carried out after `cancel()` stops the work.
        case abandoned(Caller<Value>?, Settlement<Value>)
        /// The last caller of an absorbed operation left: the operation is decided, and leaves its
        /// host's work as `settlement.host` says.
        case leftHost(Caller<Value>?, Settlement<Value>)

        /// Whether a caller was taken out of the list.
        var removedCaller: Bool {
            switch self {
            case .none: false
            case .withdrew(let caller, _), .abandoned(let caller, _), .leftHost(let caller, _): caller != nil
            }
        }
    }

    /// Removes the caller in `slot`, if it still waits. A nil `slot` stands for the operation
    /// itself when it has no caller of its own: it abandons the work only if nobody joined.
    mutating func withdraw(_ slot: Int?, reason: WithdrawalReason, policy: AbandonedWorkPolicy) -> WithdrawAction {
        switch self {
        case .pending(var callers, let admission):
            self = .modifying
            guard let entry = callers.remove(slot) else {
                self = .pending(callers, admission: admission)
                return callers.live == 0 && slot == nil ? abandon(callers, policy: policy) : .none
            }
            let applyPriority = entry.priority.map { admission?.priority?.release($0) ?? false } ?? false
            self = .pending(callers, admission: admission)
            return callers.live == 0
                ? abandon(callers, policy: policy, withdrawn: entry.caller)
                : .withdrew(entry.caller, applyPriority: applyPriority)
        case .executing(var callers, let admission):
            self = .modifying
            let entry = callers.remove(slot)
            self = .executing(callers, admission: admission)
            guard entry != nil || slot == nil else { return .none }
            return callers.live == 0
                ? abandon(callers, policy: policy, withdrawn: entry?.caller)
                : .withdrew(entry?.caller, applyPriority: false)
        case .absorbed(var callers, let host, let hostSlot):
            self = .modifying
            let entry = callers.remove(slot)
            self = .absorbed(callers, host: host, slot: hostSlot)
            guard entry != nil || slot == nil else { return .none }
            guard callers.live == 0 else { return .withdrew(entry?.caller, applyPriority: false) }
            self = .settling(.absorbed(leaving: reason))
            let settlement = Settlement(
                callers: callers, registration: nil, host: HostLink(operation: host, slot: hostSlot))
            return .leftHost(entry?.caller, settlement)
        case .settling, .settledBeforeStart, .finished:
            return .none
        case .modifying:
            preconditionFailure("OperationState: withdrawn from in the middle of a transition")
        }
    }

    /// The last caller has left running or waiting work: cancel it, or let it run, as its policy says.
    private mutating func abandon(
        _ callers: Callers<Value>, policy: AbandonedWorkPolicy, withdrawn: Caller<Value>? = nil
    ) -> WithdrawAction {
        let admission: Admission?
        let stage: Stage
        switch self {
        case .pending(_, let pending):
            (admission, stage) = (pending, .notStarted(queued: pending != nil))
        case .executing(_, let executing):
            (admission, stage) = (executing, .executing)
        case .absorbed, .settling, .settledBeforeStart, .finished, .modifying:
            preconditionFailure("OperationState: abandoned while \(self.name)")
        }
        guard policy == .cancel else {
            return .withdrew(withdrawn, applyPriority: false)
        }
        self = .settling(stage)
        return .abandoned(withdrawn, Settlement(callers: callers, registration: admission?.registration, host: nil))
    }

    /// Changes the priority that the caller in `slot` asks for. Returns whether the calling thread
    /// must apply the work's new priority.
    mutating func reprioritize(_ slot: Int, to priority: OperationPriority?) -> Bool {
        guard case .pending(var callers, let admission) = self else { return false }
        self = .modifying
        defer { self = .pending(callers, admission: admission) }
        guard let previous = callers.reprioritize(slot, to: priority) else { return false }
        var mustApply = false
        if let previous {
            mustApply = admission?.priority?.release(previous) ?? false
        }
        if let priority {
            mustApply = (admission?.priority?.demand(priority) ?? false) || mustApply
        }
        return mustApply
    }

    /// The host link of an absorbed operation, so that it can forward a change of its caller's
    /// priority to the work it rides on.
    var host: HostLink<Value>? {
        if case .absorbed(_, let host, let slot) = self { HostLink(operation: host, slot: slot) } else { nil }
    }

    /// The manager the work belongs to, while its result is open.
    var registration: Registration? {
        switch self {
        case .pending(_, let admission), .executing(_, let admission): admission?.registration
        case .absorbed, .settling, .settledBeforeStart, .finished, .modifying: nil
        }
    }

    /// How many callers wait for the result; for tests and statistics.
    var callerCount: Int {
        switch self {
        case .pending(let callers, _), .executing(let callers, _), .absorbed(let callers, _, _): callers.live
        case .settling, .settledBeforeStart, .finished, .modifying: 0
        }
    }

    // MARK: Admission

    /// Claims the operation for a queue: only an operation that is untouched (pending, not claimed).
    mutating func claim(_ admission: Admission) -> Bool {
        guard case .pending(let callers, nil) = self else { return false }
        // Callers that joined before the claim (through `value(of:)`, say) count from now on.
        if !callers.priorities.isEmpty {
            for priority in callers.statedPriorities {
                _ = admission.priority?.demand(priority)
            }
        }
        self = .pending(callers, admission: admission)
        return true
    }

    /// Claims for a queue an operation whose result was decided before anything claimed it (it was
    /// cancelled before it was enqueued), so that the queue finishes it without running it and
    /// whatever depends on it runs. False for any other operation, and the second time.
    mutating func claimDecidedBeforeEnqueue() -> Bool {
        switch self {
        case .settling(.notStarted(queued: false)):
            self = .settling(.notStarted(queued: true))
            return true
        case .settledBeforeStart(queued: false):
            self = .settledBeforeStart(queued: true)
            return true
        case .pending, .executing, .absorbed, .settling, .settledBeforeStart, .finished, .modifying:
            return false
        }
    }

    /// Whether the operation is untouched and may be absorbed: pending, not claimed by a queue,
    /// and carrying no absorbed operations of its own (delivery never nests more than one level).
    @usableFromInline
    enum Freshness: Equatable {
        case fresh
        case carriesOthers
        case unavailable
    }

    @usableFromInline
    var freshness: Freshness {
        guard case .pending(let callers, nil) = self else { return .unavailable }
        return callers.hasAbsorbed ? .carriesOthers : .fresh
    }

    /// Makes this fresh operation ride on `host`'s work, as the caller in `slot` there.
    @usableFromInline
    mutating func becomeAbsorbed(by host: CoalescibleOperation<Value>, slot: Int) {
        guard case .pending(let callers, nil) = self else {
            preconditionFailure("OperationState: absorbed while \(self.name)")
        }
        self = .absorbed(callers, host: host, slot: slot)
    }

    // MARK: Priority

    /// Records the priority the app set on the operation itself. Returns nil if no manager tracks
    /// the operation's priority (write it straight to Foundation), or whether the calling thread
    /// must apply the work's new priority.
    mutating func setOwnPriority(_ change: (inout OperationPriority) -> Void) -> Bool? {
        guard case .pending(_, let admission?) = self, admission.priority != nil else { return nil }
        return admission.priority?.setOwn(change)
    }

    /// The next priority to write to Foundation, or nil (and the applying thread released) once
    /// everything has been written or the work has started.
    mutating func nextPriorityToApply() -> OperationPriority? {
        guard case .pending(_, let admission?) = self, admission.priority != nil else { return nil }
        return admission.priority?.next()
    }

    /// The case's name, for the messages of impossible transitions.
    @usableFromInline
    var name: String {
        switch self {
        case .pending: "pending"
        case .executing: "executing"
        case .absorbed: "absorbed"
        case .settling(let stage): "settling (\(stage))"
        case .settledBeforeStart: "settled before start"
        case .finished: "finished"
        case .modifying: "modifying"
        }
    }
}

/// What a manager or queue set when it claimed an operation.
///
/// A class, touched only under the operation's lock: the state's cases then carry one reference,
/// and a join neither copies the registration (a copy of `Admission` as a struct cost a join
/// ~50 ns, BENCHMARKS.md) nor rebuilds the state to change the work's priority.
@usableFromInline
final class Admission {
    /// The manager whose index and statistics the work belongs to; nil on a queue of the app's.
    @usableFromInline let registration: Registration?
    /// The work's priority, which follows its callers while it waits; nil once it started, and for
    /// work that no manager tracks.
    @usableFromInline var priority: PriorityTracker?

    @usableFromInline
    init(registration: Registration?, priority: PriorityTracker?) {
        self.registration = registration
        self.priority = priority
    }

}

/// How a manager finds the index entry, statistics and observer that the work belongs to.
///
/// The reference is strong, and dropped when the result is decided: work in flight keeps its
/// manager alive. (A weak one costs every enqueue and every retain of the manager a trip through
/// its side table: a quarter more time for work that never coalesces.)
@usableFromInline
struct Registration {
    @usableFromInline let manager: OperationQueueManager
    @usableFromInline let key: OperationKey
    /// When the work started, in `DispatchTime` nanoseconds; read only when an observer or the
    /// stall report needs it. (A clock instant would be a resilient field: see `OperationPriority`.)
    let startedAt: UInt64?
}

/// The work an absorbed operation rides on, and its caller slot there.
@usableFromInline
struct HostLink<Value> {
    @usableFromInline let operation: CoalescibleOperation<Value>
    @usableFromInline let slot: Int

    @usableFromInline
    init(operation: CoalescibleOperation<Value>, slot: Int) {
        self.operation = operation
        self.slot = slot
    }
}

/// What the winner of ``OperationState/decide()`` must settle after releasing the lock.
@usableFromInline
struct Settlement<Value> {
    @usableFromInline var callers: Callers<Value>
    /// The manager to tell that the work ended, if one admitted it.
    @usableFromInline var registration: Registration?
    /// The work an absorbed operation rode on: it must drop this operation from its callers.
    @usableFromInline var host: HostLink<Value>?

    @inlinable
    init(callers: Callers<Value>, registration: Registration?, host: HostLink<Value>?) {
        self.callers = callers
        self.registration = registration
        self.host = host
    }
}

/// The KVO keys through which `OperationQueue` watches an operation's lifecycle.
///
/// On Linux, Foundation reacts to `didChangeValue(forKey:)` for exactly these names (and their
/// short forms); any other key, such as a custom `state`, goes unseen and jams the queue.
enum LifecycleKey {
    static let executingAndFinished = ["isExecuting", "isFinished"]
    static let finishedOnly = ["isFinished"]
}
