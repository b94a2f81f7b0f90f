import Foundation

// The machine's arrival events, one per way in: a caller by key (`join`), a task
// caller (`arrive`), an operation and the caller that comes with it (`admit`). Each decides where
// the caller goes and returns it as an action that the storage (Engine.swift) carries out.

extension Machine {
    /// Event: a caller arrives with `key` and joins the work in flight for it (its phase
    /// decides, in ``inFlight(_:hash:as:)``). Nil, nothing is in flight and nothing changed: the
    /// front-end then makes the operation that starts the work, and admits it.
    @inlinable mutating func join<Value>(
        _ key: Key, _ caller: Caller<Value>, asking urgency: Urgency?, watching sink: ProgressSink?
    ) -> Entry<Key, Value>? {
        guard let work = inFlight(key, hash: key.hashValue, as: Value.self) else { return nil }
        return join(work, caller, asking: urgency, watching: sink)
    }

    /// Event: a task caller arrives with `key`, in `role`, at `priority`. A consumer takes a value
    /// stored for the key and a prefetcher finds one (both `now`); otherwise it joins the work in
    /// flight (a prefetcher makes it a prefetch), or starts new work at `start`, whose task the
    /// storage then creates and hands back through ``assign(_:to:)``.
    @inlinable mutating func arrive<Value>(
        _ key: Key, as role: CallerRole, at priority: TaskPriority, starting start: TaskPriority,
        policy: AbandonedWorkPolicy, watching sink: ProgressSink?, at now: Duration?
    ) -> Arrival<Key, Value> {
        let hash = key.hashValue
        if role != .plain, nextExpiry != nil, let now {
            releaseExpired(at: now)
            let entry = index.work(for: key, hash: hash).map { unsafeDowncast($0, to: Work<Key, Value>.self) }
            if let entry, case .stored(let value, _) = entry.state.phase {
                guard role == .consumer else { return .alreadyStored }
                take(storedIn: entry)
                return .taken(value)
            }
        }
        let caller = Caller<Value>.arriving(consumes: role == .consumer)
        if let work = inFlight(key, hash: hash, as: Value.self) {
            if role == .prefetcher { work.state.isPrefetch = true }
            let entry = join(work, caller, asking: Urgency(priority), watching: sink)
            return .joins(entry)
        }
        let work: Work<Key, Value> = newWork(
            key, hash: hash, runner: .unstarted, policy: policy, floor: Urgency(start), at: now)
        work.state.isPrefetch = role == .prefetcher
        self.start(work)
        var entry = join(work, caller, asking: nil, watching: sink)
        entry.started = true
        return .starts(entry)
    }

    /// Event: the task that runs `work` was created, in the step its work started.
    @inlinable mutating func assign<Value>(_ task: Task<Void, Never>, to work: Work<Key, Value>) {
        work.state.runner = .task(task)
    }
}

extension Machine {
    /// The first step of an operation's admission under `key`: the entry it would have. In the
    /// work in flight, in the next slot; or (no slot) to run new work, made here for `operation` at
    /// `floor`, and known to nothing until ``admit(_:_:taken:asking:watching:then:)`` starts it.
    @inlinable func planAdmission<Value>(
        _ key: Key, running operation: CoalescibleOperation<Value>, floor: Urgency, policy: AbandonedWorkPolicy,
        at now: Duration?
    ) -> Entry<Key, Value> {
        let hash = key.hashValue
        if let work = inFlight(key, hash: hash, as: Value.self) {
            return Entry(work, slot: work.state.callers.entries.count)
        }
        let work: Work<Key, Value> = newWork(
            key, hash: hash, runner: .operation(operation), policy: policy, floor: floor, at: now)
        return Entry(work, slot: nil)
    }

    /// Event: `operation`, asking for `urgency` (what the app set on it), was `taken` for `plan`,
    /// and `newcomer` comes with it, if any, in place of its own caller.
    ///
    /// Taken fresh, the operation joins the work in flight or starts the planned work (its own
    /// caller, watching `sink`, the first to wait). Not fresh, it is handed to the queue if it is
    /// on none, or left alone. The newcomer then waits for the work the operation started or
    /// joined, or one it runs or joined here before, while that work's result is open; one that
    /// finds none is turned away.
    @inlinable mutating func admit<Value>(
        _ operation: CoalescibleOperation<Value>, _ plan: Entry<Key, Value>, taken: Taking<Key, Value>,
        asking urgency: Urgency, watching sink: ProgressSink?, then newcomer: OperationQueueManager.Newcomer<Value>?
    ) -> Admitted<Key, Value> {
        let entry: Entry<Key, Value>
        // Whether the operation runs the work: its priority is then the work's floor, and its
        // getters say what the callers last wrote there (Guarantee 19).
        let runs: Bool
        switch taken {
        case .joins:
            let joined = join(plan.work, .operation(operation), asking: urgency, watching: sink)
            (entry, runs) = (joined, false)
        case .runs(let own):
            start(plan.work)
            var started = Entry(plan.work, slot: nil)
            if let own { started = join(plan.work, own, asking: nil, watching: sink) }
            started.started = true
            (entry, runs) = (started, true)
        case .unqueued(let ownWork):
            // Not fresh, but on no queue: work of its own, or cancelled before it was enqueued.
            return .turnsAway(enqueues: true, runs: ownWork)
        case .refused(let found?, let runsFound) where newcomer != nil:
            switch found.state.phase {
            case .running: (entry, runs) = (Entry(found, slot: nil), runsFound)
            case .deciding, .stored, .ended: return .turnsAway(enqueues: false, runs: false)
            }
        case .refused:
            return .turnsAway(enqueues: false, runs: false)
        }
        guard let newcomer else { return entry.started ? .starts(entry) : .joins(entry) }
        // Beside the operation that runs the work, the newcomer asks only for what it brought.
        let asked = runs ? newcomer.urgency : newcomer.asking(beside: urgency)
        var joined = join(entry.work, newcomer.caller, asking: asked, watching: newcomer.sink)
        if entry.raised { joined.raised = true }
        joined.started = entry.started
        return entry.started ? .starts(joined) : .joins(joined)
    }
}

// MARK: - Actions

/// Where a caller arrived, and what its join decided, for the storage's `follow` to carry out:
/// the work it started or joined, its slot there (the entry an operation's admission plans, before
/// it is taken, is one too), whether it raised the work's priority (to
/// write), whether it is owed the latest progress (to deliver), and whether it started the work
/// (to watch for stalls).
@usableFromInline struct Entry<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    @usableFromInline let work: Work<Key, Value>
    /// Nil for an operation that started work with no caller of its own.
    @usableFromInline let slot: Int?
    @usableFromInline var raised = false
    @usableFromInline var delivers = false
    @usableFromInline var started = false

    @inlinable init(_ work: Work<Key, Value>, slot: Int?) {
        (self.work, self.slot) = (work, slot)
    }
}

/// What a task caller's arrival decided.
@usableFromInline enum Arrival<Key: Hashable & Sendable, Value: Sendable> {
    /// A consumer took the value stored for its key: nothing to wait for.
    case taken(Value)
    /// A prefetcher found a value stored already: nothing to do.
    case alreadyStored
    /// It joined the work in flight.
    case joins(Entry<Key, Value>)
    /// It started new work, whose task the storage creates now.
    case starts(Entry<Key, Value>)
}

/// What taking an operation for a plan found, in one turn of the operation's lock: what the
/// operation is, for the admission to decide from.
@usableFromInline enum Taking<Key: Hashable & Sendable, Value: Sendable> {
    /// Fresh, taken to join the planned work: its completion handler stays with it until it hears.
    case joins
    /// Fresh, taken to run the planned work: `own` is its completion handler, if any, as the
    /// work's first caller, no longer held by the operation.
    case runs(own: Caller<Value>?)
    /// Not fresh, and on no queue, so handed to the manager's queue now (admission only): it
    /// `runs` work of its own, or was decided before it was enqueued.
    case unqueued(runs: Bool)
    /// Not fresh: nobody may take it. `work` is the work it runs (`runs`) or joined in this
    /// engine, if any (admission only).
    case refused(Work<Key, Value>?, runs: Bool)
}

/// What admitting an operation decided.
@usableFromInline enum Admitted<Key: Hashable & Sendable, Value: Sendable> {
    /// The operation starts the work: it goes on the queue; `entry` is the newcomer's, or the
    /// operation's own caller's.
    case starts(Entry<Key, Value>)
    /// The operation, or the newcomer beside it, joined the work in flight: nothing is queued.
    case joins(Entry<Key, Value>)
    /// Nothing to start or join: the operation goes on the queue if it `enqueues` (it was on none,
    /// and `runs` work of its own or ends at once); the newcomer, if any, is turned away: it hears
    /// that its work was cancelled.
    case turnsAway(enqueues: Bool, runs: Bool)
}
