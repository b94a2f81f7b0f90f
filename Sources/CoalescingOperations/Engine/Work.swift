import Foundation

/// What the machine needs of a work whatever its `Value`: its key, phase, callers' count and
/// priorities.
///
/// Every `var` here and in ``Work`` is read and written only by the ``Machine`` of the engine that
/// holds the work, under that engine's lock.
@usableFromInline class AnyWork<Key: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: every `var` is guarded by the lock of the `Engine` that created the work. The same
    // lock makes every access exclusive, so the runtime's exclusivity checks are switched off for
    // them (`@exclusivity(unchecked)`): measured, they cost a join ~290 instructions.
    @usableFromInline let key: Key
    /// Its number in its coalescer, 1 for the first, as its events name it.
    @usableFromInline @exclusivity(unchecked) var number = 0
    @usableFromInline @exclusivity(unchecked) var phase = Phase.running
    /// Callers waiting now.
    @usableFromInline @exclusivity(unchecked) var live = 0
    /// Callers that ever arrived: the first started the work, the others joined it.
    @usableFromInline @exclusivity(unchecked) var arrivals = 0
    /// Tasks that have a slot and have not parked their continuation yet.
    @usableFromInline @exclusivity(unchecked) var unparked = 0
    /// Whether new callers find the work under its key (or its stored value).
    @usableFromInline @exclusivity(unchecked) var isIndexed = true
    /// Whether a prefetch ever joined: the value is then stored if no consumer waits for it.
    @usableFromInline @exclusivity(unchecked) var isPrefetch = false
    /// What happens when the last caller withdraws.
    @usableFromInline let policy: AbandonedWorkPolicy
    /// When the work started, on its coalescer's clock; only kept where an observer wants durations.
    @usableFromInline let startedAt: Duration?
    /// The latest progress the work reported, for callers who join later.
    @usableFromInline @exclusivity(unchecked) var progress: WorkProgress?

    /// The priority: see Priority.swift.
    @usableFromInline @exclusivity(unchecked) var priority: PriorityState

    @inlinable init(key: Key, policy: AbandonedWorkPolicy, floor: Urgency, risesOnly: Bool, startedAt: Duration?) {
        self.key = key
        self.policy = policy
        priority = PriorityState(floor: floor, risesOnly: risesOnly)
        self.startedAt = startedAt
    }

    /// Writes the priority to whatever runs the work.
    func write(_ priority: Urgency) { preconditionFailure("AnyWork is abstract") }
    /// Cancels the work for all its callers.
    func cancel(in engine: Engine<Key>) { preconditionFailure("AnyWork is abstract") }
    /// Ends a stored result's wait, taken, expired or dropped: the phase and the value go together.
    @usableFromInline func dropStored() { preconditionFailure("AnyWork is abstract") }
}

/// One run of the work for one key, and its callers.
@usableFromInline final class Work<Key: Hashable & Sendable, Value: Sendable>: AnyWork<Key>, @unchecked Sendable {
    // @unchecked: like `AnyWork`, every `var` is guarded by the engine's lock.
    @usableFromInline @exclusivity(unchecked) var callers = Callers<Value>()
    @usableFromInline @exclusivity(unchecked) var runner: Runner<Value>
    /// The callers that asked for progress, by slot: empty, and free, when none did.
    @usableFromInline @exclusivity(unchecked) var calls: [Int: Call<Value>] = [:]
    /// What each task that has not parked yet is owed, by slot.
    @usableFromInline @exclusivity(unchecked) var owed: [Int: Result<Value, Error>] = [:]
    /// The prefetched value, while the phase is ``Phase/stored(until:)``.
    @usableFromInline @exclusivity(unchecked) var stored: Value?

    @inlinable init(
        key: Key, runner: Runner<Value>, policy: AbandonedWorkPolicy, floor: Urgency, startedAt: Duration?
    ) {
        self.runner = runner
        let risesOnly = if case .operation = runner { false } else { true }
        super.init(key: key, policy: policy, floor: floor, risesOnly: risesOnly, startedAt: startedAt)
    }

    override func write(_ priority: Urgency) { runner.prioritize(priority) }

    override func cancel(in engine: Engine<Key>) {
        engine.end(self, with: .failure(CoalescingError.cancelled), stopping: true)
    }

    @usableFromInline override func dropStored() {
        phase = .ended
        stored = nil
    }

    /// Gives the caller in `slot` its last call, `result`. Returns the caller to hand it to now; nil
    /// when it had its last call already, or will have it after the call on its way, or (a task
    /// that has not parked) when it parks. A caller that leaves (`droppingProgress`) hears no
    /// progress after it left (Guarantee 26); one served keeps the latest value, before the result.
    @usableFromInline func conclude(_ slot: Int, with result: Result<Value, Error>, droppingProgress: Bool)
        -> Caller<Value>?
    {
        let caller = callers.entries[slot]
        switch caller {
        case .owed, .gone, .held:
            return nil
        case .arriving:
            callers.entries[slot] = .owed
            owed[slot] = result
            if droppingProgress { calls[slot]?.latest = nil }
            return nil
        case .handler, .operation, .parked:
            callers.entries[slot] = .gone
            guard !calls.isEmpty, var call = calls[slot] else { return caller }
            guard call.busy else {
                calls[slot] = nil
                return caller
            }
            if droppingProgress { call.latest = nil }
            call.last = Owed(caller: caller, result: result)
            calls[slot] = call
            return nil
        }
    }

    /// Registers the progress of the caller in `slot`; returns whether the latest value is owed to
    /// it at once (Guarantee 25). Kept out of line, so that joins without progress stay small.
    @usableFromInline func watch(_ sink: ProgressSink, in slot: Int) -> Bool {
        calls[slot] = Call(sink: sink, latest: progress, busy: progress != nil)
        return progress != nil
    }
}

/// What runs the work: an operation on a queue, or a task.
@usableFromInline enum Runner<Value: Sendable>: Sendable {
    case operation(CoalescibleOperation<Value>)
    case task(Task<Void, Never>)
    /// A task's work between its creation and its task's, both in one critical section.
    case unstarted

    /// Stops the work: cancels the operation (through its `cancel()`, which a subclass may
    /// override to stop what it started) or the task.
    @usableFromInline func stop() {
        switch self {
        case .operation(let operation): operation.cancel()
        case .task(let task): task.cancel()
        case .unstarted: break
        }
    }

    func prioritize(_ urgency: Urgency) {
        switch self {
        case .operation(let operation): operation.write(urgency.operationPriority)
        case .task(let task): Controls.escalate(task, to: urgency.taskPriority)
        case .unstarted: break
        }
    }
}

/// The callers of one work, in slots that stay valid when a caller leaves.
///
/// Joining costs one append, whatever the number of callers. The list also tracks whether every
/// caller so far is a handler on one queue, so that the result reaches them all in one hop as the
/// list itself.
@usableFromInline struct Callers<Value: Sendable> {
    @usableFromInline var entries: ContiguousArray<Caller<Value>> = []
    @usableFromInline var queues = Queues.none

    @usableFromInline enum Queues {
        case none
        /// Every caller is a handler on this queue (nil: served on the settling thread).
        case one(OperationQueue?)
        case several
    }

    @inlinable init() {}

    @inlinable mutating func add(_ caller: Caller<Value>) -> Int {
        switch (caller, queues) {
        case (.handler(_, let queue), .none): queues = .one(queue)
        case (.handler(_, let queue), .one(let shared)) where shared === queue: break
        default: queues = .several
        }
        if entries.count == 1 {
            // Work that one caller joins often draws a crowd: grow once, not at every doubling.
            entries.reserveCapacity(16)
        }
        entries.append(caller)
        return entries.count - 1
    }

    /// Whether a consumer of a prefetch still waits: the value is then its, not stored.
    @usableFromInline var hasConsumer: Bool {
        entries.contains {
            switch $0 {
            case .arriving(consumes: true), .parked(_, consumes: true): true
            default: false
            }
        }
    }
}
