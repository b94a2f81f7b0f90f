import Foundation

/// One run of the work for one key, whatever its `Value`: what never changes about it, and what
/// the events over every key (forget, cancel, expiry) see of its state.
@usableFromInline class AnyWork<Key: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: immutable; the state, in the subclass, is guarded by its engine's lock.
    @usableFromInline let key: Key
    /// The key's hash, taken once as the key arrived: see ``WorkIndex``.
    @usableFromInline let hash: Int
    /// Its number in its coalescer, 1 for the first, as its events name it.
    @usableFromInline let number: Int
    /// What happens when the last caller withdraws.
    @usableFromInline let policy: AbandonedWorkPolicy
    /// When the work started, on its coalescer's clock; only kept where events need the time.
    @usableFromInline let startedAt: Duration?
    /// Its operation's start (``Machine/begin(_:)``), made with the work, where its `Value` is
    /// known: Foundation starts operations through code that knows no `Value`, where the start
    /// looked the work's state up at run time, ~1,300 instructions an operation (BENCHMARKS.md).
    @usableFromInline let begin: (inout Machine<Key>, AnyWork<Key>) -> Begun

    @inlinable init(
        key: Key, hash: Int, number: Int, policy: AbandonedWorkPolicy, startedAt: Duration?,
        begin: @escaping (inout Machine<Key>, AnyWork<Key>) -> Begun
    ) {
        (self.key, self.hash, self.number, self.policy) = (key, hash, number, policy)
        (self.startedAt, self.begin) = (startedAt, begin)
    }

    /// Where the work stands, its stored value left out.
    @usableFromInline var stage: Stage { preconditionFailure("AnyWork is abstract") }

    /// Ends a stored result's wait: expired or dropped. The value goes with its phase; returns
    /// the hold of the task that stored it, which a drop waits for (Guarantee 15).
    @usableFromInline func dropStored() -> DispatchGroup? { preconditionFailure("AnyWork is abstract") }

    /// Cancels the work for all its callers.
    func cancel(in engine: Engine<Key>) { preconditionFailure("AnyWork is abstract") }
}

/// One run of the work for one key, and its callers. All that changes is ``state``, one value.
@usableFromInline final class Work<Key: Hashable & Sendable, Value: Sendable>: AnyWork<Key>, @unchecked Sendable {
    // @unchecked: `state` is read and written only by the ``Machine`` of the engine that holds the
    // work, under that engine's lock. The same lock makes every access exclusive, so the runtime's
    // exclusivity checks are switched off (`@exclusivity(unchecked)`): measured, they cost a join
    // ~290 instructions.
    @usableFromInline @exclusivity(unchecked) var state: WorkState<Value>

    @inlinable init(
        key: Key, hash: Int, number: Int, runner: Runner<Value>, policy: AbandonedWorkPolicy, floor: Urgency,
        startedAt: Duration?
    ) {
        let risesOnly = if case .operation = runner { false } else { true }
        state = WorkState(runner: runner, priority: PriorityState(floor: floor, risesOnly: risesOnly))
        super.init(key: key, hash: hash, number: number, policy: policy, startedAt: startedAt) { machine, work in
            machine.begin(unsafeDowncast(work, to: Work<Key, Value>.self))
        }
    }

    @usableFromInline override var stage: Stage {
        switch state.phase {
        case .running: .running
        case .deciding: .deciding
        case .stored(_, let expiry): .stored(until: expiry)
        case .ended: .ended
        }
    }

    @usableFromInline override func dropStored() -> DispatchGroup? {
        state.phase = .ended
        return state.storing
    }

    override func cancel(in engine: Engine<Key>) {
        let cancelled: Result<Value, Error> = .failure(CoalescingError.cancelled)
        let decision = engine.decide(self, with: cancelled, stopping: true)
        engine.carryOut(decision, of: self, with: cancelled)
    }
}

/// Everything about one work that changes, in one value: copying it copies the work.
@usableFromInline struct WorkState<Value: Sendable> {
    @usableFromInline var phase = Phase<Value>.running
    @usableFromInline var runner: Runner<Value>
    @usableFromInline var callers = Callers<Value>()
    /// The priority: see Priority.swift.
    @usableFromInline var priority: PriorityState
    /// The callers that asked for progress, by slot: empty, and free, when none did. Apart from
    /// the slots, which few of them would fill, so that a slot stays small.
    @usableFromInline var calls: [Int: Call<Value>] = [:]
    /// The latest progress the work reported, for callers who join later.
    @usableFromInline var progress: WorkProgress?
    /// Whether a prefetch ever joined: the value is then stored if no consumer waits for it.
    @usableFromInline var isPrefetch = false
    /// Once its value is stored, the hold of the task that ran the work, which has the value until
    /// it is out of its end; left then.
    @usableFromInline var storing: DispatchGroup?

    @inlinable init(runner: Runner<Value>, priority: PriorityState) {
        (self.runner, self.priority) = (runner, priority)
    }

    /// Registers the progress of the caller in `slot`; returns whether the latest value is owed to
    /// it at once (Guarantee 25). Kept out of line, so that joins without progress stay small.
    @usableFromInline mutating func watch(_ sink: ProgressSink, in slot: Int) -> Bool {
        calls[slot] = Call(sink: sink, latest: progress, busy: progress != nil)
        return progress != nil
    }

    /// The task in `slot`, owed `result`, parks `continuation`. Returns whether it hears now: not
    /// while a progress call to it is on its way, after which it hears.
    @inlinable mutating func parkOwed(
        _ continuation: UnsafeContinuation<Value, Error>, in slot: Int, owed result: Result<Value, Error>
    ) -> Bool {
        callers.unparked -= 1
        callers.entries[slot].caller = .parked(continuation, consumes: false)
        let caller = conclude(slot, with: result, droppingProgress: true)
        return caller != nil
    }

    /// Gives the caller in `slot` its last call, `result`. Returns the caller to hand it to now; nil
    /// when it had its last call already, or will have it after the call on its way, or (a task
    /// that has not parked) when it parks. A caller that leaves (`droppingProgress`) hears no
    /// progress after it left (Guarantee 26); one served keeps the latest value, before the result.
    @usableFromInline mutating func conclude(_ slot: Int, with result: Result<Value, Error>, droppingProgress: Bool)
        -> Caller<Value>?
    {
        let caller = callers.entries[slot].caller
        switch caller {
        case .owed, .gone, .held:
            return nil
        case .arriving:
            callers.entries[slot].caller = .owed(result)
            if droppingProgress { calls[slot]?.latest = nil }
            return nil
        case .handler, .operation, .parked:
            callers.entries[slot].caller = .gone
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
}

/// Where a work stands.
@usableFromInline enum Phase<Value: Sendable> {
    /// In flight: callers join it, and its result is open.
    case running
    /// Its result is decided and on its way: the work is being stopped and its end reported.
    case deciding
    /// A prefetched value waits for its consumer until `until` on the coalescer's clock.
    case stored(Value, until: Duration)
    /// Its callers were handed the result, or its stored value was taken, expired or dropped.
    case ended
}

/// A ``Phase`` without its value, for the events over every key.
@usableFromInline enum Stage: Equatable {
    case running, deciding, stored(until: Duration), ended
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

    @usableFromInline func prioritize(_ urgency: Urgency) {
        switch self {
        case .operation(let operation): operation.write(urgency.operationPriority)
        case .task(let task): Controls.escalate(task, to: urgency.taskPriority)
        case .unstarted: break
        }
    }
}

/// The callers of one work, in slots that stay valid when a caller leaves, and their counts.
///
/// Joining costs one append, whatever the number of callers. The list also tracks whether every
/// caller so far is a handler on one queue, so that the result reaches them all in one hop as the
/// list itself. The counts restate the slots, kept so that no event scans them; the explorer
/// checks that they agree.
@usableFromInline struct Callers<Value: Sendable> {
    @usableFromInline var entries: ContiguousArray<Slot<Value>> = []
    @usableFromInline var queues = Queues.none
    /// Callers waiting now.
    @usableFromInline var live = 0
    /// Callers that ever arrived: the first started the work, the others joined it.
    @usableFromInline var arrivals = 0
    /// Tasks that have not parked, or parked while the work was deciding: the settle looks at
    /// every slot while there are any.
    @usableFromInline var unparked = 0

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
        entries.append(Slot(caller))
        return entries.count - 1
    }

    /// Whether a consumer of a prefetch still waits: the value is then its, not stored.
    @usableFromInline var hasConsumer: Bool {
        entries.contains {
            switch $0.caller {
            case .arriving(consumes: true), .parked(_, consumes: true): true
            default: false
            }
        }
    }
}

/// One caller's place in a work: where it stands, and the urgency it asks for. A slot stays 32
/// bytes (the caller's progress, which few ask for, is kept apart in ``WorkState/calls``).
@usableFromInline struct Slot<Value: Sendable> {
    @usableFromInline var caller: Caller<Value>
    /// What it asks for of the work's priority; nil when it asks for nothing, or has left. A task
    /// coalescer's work only ever rises, so its slots keep none (``PriorityState/risesOnly``).
    @usableFromInline var demand: Urgency?

    @inlinable init(_ caller: Caller<Value>) {
        self.caller = caller
    }
}

/// Where one caller of a work stands, in its slot.
@usableFromInline enum Caller<Value: Sendable> {
    /// A completion handler, called on `queue`, or on the thread that serves it when nil.
    case handler(@Sendable (Result<Value, Error>) -> Void, queue: OperationQueue?)
    /// An operation that joined the work: it never runs, finishes when it hears, and hands what it
    /// hears to its own handler. Without one it waits for nobody and is no caller.
    case operation(CoalescibleOperation<Value>)
    /// A task that arrived and has not parked its continuation yet. `consumes` marks a consumer of
    /// a prefetchable coalescer, which takes the value instead of leaving it stored.
    case arriving(consumes: Bool)
    /// A task waiting on its continuation.
    case parked(UnsafeContinuation<Value, Error>, consumes: Bool)
    /// A task that has not parked yet, owed its last call: it hears as it parks. Indirect, so that
    /// a slot never grows with `Value`.
    indirect case owed(Result<Value, Error>)
    /// A task that parked while its work was deciding, owed its last call: it hears at the settle.
    indirect case held(UnsafeContinuation<Value, Error>, owed: Result<Value, Error>)
    /// Has had its last call, or has it on its way: nothing more reaches it.
    case gone

    /// Whether it still waits for its last call.
    @inlinable var isOpen: Bool {
        switch self {
        case .handler, .operation, .arriving, .parked, .held: true
        case .owed, .gone: false
        }
    }

    /// Whether it is a caller, open: everyone but an operation without a handler of its own.
    @inlinable var waits: Bool {
        switch self {
        case .handler, .arriving, .parked, .held: true
        case .operation(let operation): operation.hasOwnCaller
        case .owed, .gone: false
        }
    }
}

/// One caller's progress: where it goes, the latest value not yet handed over, whether a call is
/// on its way, and the last call to make after it. A caller receives one call at a time, and the
/// last call last (Guarantee 24).
@usableFromInline struct Call<Value: Sendable> {
    let sink: ProgressSink
    var latest: WorkProgress?
    var busy: Bool
    var last: Owed<Value>?
}
