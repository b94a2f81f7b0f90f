import Foundation

// The machine's arrival events, one per way in: a caller by key (`join`), a task
// caller (`arrive`), an operation and the caller that comes with it (`admit`). Each decides where
// the caller goes and returns it as an action that the storage (Engine.swift) carries out.

extension Machine {
    /// Event: a caller arrives with `key` and joins the work in flight for it, if any; nil if
    /// there is none, and the front-end makes the operation that starts it.
    @inlinable mutating func join<Value>(
        _ key: Key, _ caller: Caller<Value>, asking urgency: Urgency?, watching sink: ProgressSink?
    ) -> Entry<Key, Value>? {
        guard let work = inFlight(key, as: Value.self) else { return nil }
        let joined = join(work, caller, asking: urgency, watching: sink)
        return Entry(work, joined)
    }

    /// Event: a task caller arrives with `key`, in `role`, at `priority`. A consumer takes a value
    /// stored for the key and a prefetcher finds one (both `now`); otherwise it joins the work in
    /// flight (a prefetcher makes it a prefetch), or starts new work at `start`, whose task the
    /// storage then creates and hands back through ``assign(_:to:)``.
    @inlinable mutating func arrive<Value>(
        _ key: Key, as role: CallerRole, at priority: TaskPriority, starting start: TaskPriority,
        policy: AbandonedWorkPolicy, watching sink: ProgressSink?, at now: Duration?
    ) -> Arrival<Key, Value> {
        if role != .plain, nextExpiry != nil, let now {
            releaseExpired(at: now)
            let entry = index[key].map { unsafeDowncast($0, to: Work<Key, Value>.self) }
            if let entry, case .stored(let value, _) = entry.state.phase {
                guard role == .consumer else { return .alreadyStored }
                take(storedIn: entry)
                return .taken(value)
            }
        }
        let caller = Caller<Value>.arriving(consumes: role == .consumer)
        if let work = inFlight(key, as: Value.self) {
            if role == .prefetcher { work.state.isPrefetch = true }
            let joined = join(work, caller, asking: Urgency(priority), watching: sink)
            return .joins(work, joined)
        }
        let work: Work<Key, Value> = newWork(key, runner: .unstarted, policy: policy, floor: Urgency(start), at: now)
        work.state.isPrefetch = role == .prefetcher
        self.start(work)
        let joined = join(work, caller, asking: nil, watching: sink)
        return .starts(work, joined)
    }

    /// Event: the task that runs `work` was created, in the step its work started.
    @inlinable mutating func assign<Value>(_ task: Task<Void, Never>, to work: Work<Key, Value>) {
        work.state.runner = .task(task)
    }
}

extension Machine where Key == OperationKey {
    /// Event: `operation` arrives under `key`, asking for `urgency`, and `newcomer` with it, if
    /// any, in place of its own caller. `claim` takes the operation, in one turn of its lock, to
    /// join a work (in a slot) or run one, or says what it is when it is not fresh.
    ///
    /// The operation joins the work in flight, or starts new work (its own caller, watching `sink`,
    /// the first to wait); not fresh, it is handed to the queue if it is on none, or left alone.
    /// The newcomer then waits for the work the operation started or joined, or one it was
    /// enqueued here for before, while that work's result is open; a handler that finds none is
    /// refused: it hears that its work was cancelled.
    @inlinable mutating func admit<Value>(
        _ operation: CoalescibleOperation<Value>, as key: OperationKey, asking urgency: Urgency,
        policy: AbandonedWorkPolicy, watching sink: ProgressSink?,
        then newcomer: OperationQueueManager.Newcomer<Value>?,
        at now: Duration?, claim: (Work<OperationKey, Value>, Int?) -> CoalescibleOperation<Value>.Taking
    ) -> Admitted<Value> {
        var admitted = Admitted<Value>()
        var runsWork = false
        let taking: CoalescibleOperation<Value>.Taking
        if let work = inFlight(key, as: Value.self) {
            taking = claim(work, work.state.callers.entries.count)
            if case .joins = taking {
                let joined = join(work, .operation(operation), asking: urgency, watching: sink)
                admitted = Admitted(.joinedWork, Entry(work, joined))
            }
        } else {
            let work = newWork(key, runner: .operation(operation), policy: policy, floor: urgency, at: now)
            taking = claim(work, nil)
            if case .runs(let own) = taking {
                start(work)
                var joined: Joined?
                if let own {
                    joined = join(work, .handler(own, queue: operation.callBackQueue), asking: nil, watching: sink)
                }
                admitted = Admitted(.startedWork, Entry(work, joined, started: true))
                admitted.queued = true
            }
        }
        switch taking {
        case .joins, .runs:
            break
        case .unqueued(let runs):
            // Not fresh, but on no queue: work of its own, or cancelled before it was enqueued.
            admitted.admission = runs ? .startedWork : .ignored
            admitted.queued = true
        case .refused(let work?, let runs) where newcomer != nil:
            if case .running = work.state.phase { admitted = Admitted(.joinedWork, Entry(work, nil)) }
            runsWork = runs
        case .refused:
            break
        }
        guard let newcomer else { return admitted }
        guard let entry = admitted.entry else {
            if case .handler = newcomer.caller { admitted.refusesNewcomer = true }
            return admitted
        }
        // Where the operation runs the work, started here or before, its priority is the work's
        // floor, which the app may move, and its getters say what was last written: the newcomer
        // asks only for what it brought itself (Guarantee 19).
        let asked = entry.started || runsWork ? newcomer.urgency : newcomer.asking(beside: urgency)
        var joined = join(entry.work, newcomer.caller, asking: asked, watching: newcomer.sink)
        if entry.joined?.raised == true { joined.raised = true }
        admitted.entry = Entry(entry.work, joined, started: entry.started)
        return admitted
    }
}

// MARK: - Actions

/// Where a caller arrived: the work it started or joined and what the join decided, for the
/// storage's `follow` to carry out.
@usableFromInline struct Entry<Key: Hashable & Sendable, Value: Sendable> {
    @usableFromInline let work: Work<Key, Value>
    /// Nil for an operation that started work with no caller of its own.
    @usableFromInline let joined: Joined?
    /// Whether the caller started the work: it is then watched for stalls.
    @usableFromInline let started: Bool

    @inlinable init(_ work: Work<Key, Value>, _ joined: Joined?, started: Bool = false) {
        self.work = work
        self.joined = joined
        self.started = started
    }
}

/// What a task caller's arrival decided.
@usableFromInline enum Arrival<Key: Hashable & Sendable, Value: Sendable> {
    /// A consumer took the value stored for its key: nothing to wait for.
    case taken(Value)
    /// A prefetcher found a value stored already: nothing to do.
    case alreadyStored
    /// It joined the work in flight.
    case joins(Work<Key, Value>, Joined)
    /// It started new work, whose task the storage creates now.
    case starts(Work<Key, Value>, Joined)
}

/// What admitting an operation decided.
@usableFromInline struct Admitted<Value: Sendable> {
    @usableFromInline var admission = CoalescingHandle<Value>.Admission.ignored
    /// The work the caller started or joined here, and its slot there.
    @usableFromInline var entry: Entry<OperationKey, Value>?
    /// Whether the operation must be added to the queue.
    @usableFromInline var queued = false
    /// Whether the newcomer, a handler that came with an operation that was not fresh and found no
    /// work, hears that its work was cancelled. (A flag, not the caller: a field whose layout
    /// depends on `Value` made every join copy and destroy this action through value witnesses.)
    @usableFromInline var refusesNewcomer = false

    @inlinable init(
        _ admission: CoalescingHandle<Value>.Admission = .ignored, _ entry: Entry<OperationKey, Value>? = nil
    ) {
        self.admission = admission
        self.entry = entry
    }
}
