import Foundation

/// The engine's state machine: which work is in flight under which key, where each work stands
/// (``Phase``), where each of its callers stands (``Caller``), and what is owed to whom.
///
/// One `mutating func` per event, each returning what must happen next, named for that event.
/// The machine decides and never acts: it runs no user code, resumes no continuation, posts no
/// KVO and starts no delivery. ``Engine``, the storage, holds it behind its lock, sends it the
/// events and carries the actions out once the lock is released. Because the transitions touch
/// nothing else, a test can drive them without threads and explore every order of a scenario's
/// events (`MachineExplorationTests`).
///
/// A work's end takes two events: ``decide(_:with:stopping:)`` fixes the result, counts it and
/// records its event; ``settle(_:with:)`` hands it to the callers. Between the two the storage
/// stops the work and delivers the events, so that running work sees its cancellation, and the
/// observer its end, before any caller hears. Nothing reaches a caller of a decided work until
/// it settles.
@usableFromInline struct Machine<Key: Hashable & Sendable> {
    /// Work a new caller joins. An entry leaves in the step its work is decided or forgotten, and
    /// only if it still holds that work.
    @usableFromInline var index: [Key: AnyWork<Key>] = [:]
    /// Forgotten work still in flight, so that cancelling everything reaches it.
    @usableFromInline var forgotten: [ObjectIdentifier: AnyWork<Key>] = [:]
    @usableFromInline var statistics = CoalescingStatistics()
    /// Events, and what must wait for them, not yet delivered; nil when nobody observes.
    @usableFromInline var outbox: Outbox<Key>?
    /// How long a prefetched result waits for its consumer; nil where nothing is stored.
    @usableFromInline let prefetchTimeout: Duration?
    /// The earliest expiry among stored results, or later; nil when nothing is stored.
    @usableFromInline var nextExpiry: Duration?

    init(observed: Bool, prefetchTimeout: Duration?) {
        outbox = observed ? Outbox() : nil
        self.prefetchTimeout = prefetchTimeout
    }

    @inlinable mutating func record(_ event: @autoclosure () -> CoalescingEvent<Key>) {
        outbox?.pending.append(.event(event()))
    }

    // MARK: Arriving

    /// The work a new caller of `key` joins, if any.
    @inlinable func inFlight<Value>(_ key: Key, as _: Value.Type) -> Work<Key, Value>? {
        // Every work under a key has the key's `Value` type: the operations' keys include it, and
        // a task coalescer has one.
        guard let work = index[key], case .running = work.phase else { return nil }
        return unsafeDowncast(work, to: Work<Key, Value>.self)
    }

    /// Event: new work starts under its key.
    @inlinable mutating func start<Value>(_ work: Work<Key, Value>) {
        index[work.key] = work
        work.number = statistics.countStart()
        record(.workStarted(key: work.key, work: work.number))
    }

    /// Event: a caller arrives at work in flight. The first to arrive started it, every later one
    /// joins it. Only a caller counts, and only a caller's urgency moves the work (Guarantee 19).
    @inlinable mutating func join<Value>(
        _ work: Work<Key, Value>, _ caller: Caller<Value>, asking urgency: Urgency?, watching sink: ProgressSink? = nil
    ) -> Joined {
        let slot = work.callers.add(caller)
        guard caller.waits else { return Joined(slot: slot) }
        var joined = Joined(slot: slot)
        if let urgency { joined.raised = work.priority.demand(urgency, from: slot) }
        if let sink { joined.delivers = work.watch(sink, in: slot) }
        if case .arriving = caller { work.unparked += 1 }
        work.live += 1
        statistics.countArrival(joining: work.arrivals > 0)
        if work.arrivals > 0 { record(.callerJoined(key: work.key, work: work.number, callers: work.live)) }
        work.arrivals += 1
        return joined
    }

    /// Event: the caller in `slot` withdraws or times out, hearing its error, or (a joined
    /// operation finished by hand) `result`. Nil `slot` stands for the operation that started the
    /// work with no caller of its own: it abandons the work only if nobody waits. When the last
    /// caller leaves, the work follows its ``AbandonedWorkPolicy``.
    @usableFromInline mutating func withdraw<Value>(
        _ work: Work<Key, Value>, slot: Int?, reason: WithdrawalReason, hearing result: Result<Value, Error>? = nil
    ) -> Withdrawn<Value> {
        var action = Withdrawn<Value>()
        switch work.phase {
        case .running:
            break
        case .deciding, .ended, .stored:
            // Late, and expected: the caller left (its timeout fired, its task or operation was
            // cancelled) as or after the result was decided, which is its last call (Guarantee 17).
            return action
        }
        var waited = true
        if let slot {
            guard work.callers.entries[slot].isOpen else { return action }
            waited = work.callers.entries[slot].waits
            if waited {
                work.live -= 1
                statistics.countDeparture(reason)
                record(.callerWithdrawn(key: work.key, work: work.number, reason: reason))
            }
            action.reprioritizes = work.priority.release(slot)
            let heard = result ?? .failure(reason.error)
            let told = work.conclude(slot, with: heard, droppingProgress: true)
            if let told { action.told = (told, heard) }
        }
        if waited, work.live == 0, work.policy == .cancel {
            action.decided = decide(work, with: .failure(CoalescingError.cancelled), stopping: true)
        }
        return action
    }

    /// Event: the caller in `slot`, a task, parks its continuation. Returns the result to resume it
    /// with at once, if it is owed one and no call to it is on its way. Inlinable: unspecialized, it
    /// looked its types up at run time for every waiter.
    @inlinable mutating func park<Value>(
        _ work: Work<Key, Value>, _ continuation: UnsafeContinuation<Value, Error>, in slot: Int
    ) -> Result<Value, Error>? {
        switch work.callers.entries[slot] {
        case .arriving(let consumes):
            work.unparked -= 1
            work.callers.entries[slot] = .parked(continuation, consumes: consumes)
            return nil
        case .owed:
            let result = work.owed[slot]!
            if case .deciding = work.phase {
                // It hears at the settle, after the stop and the events (Guarantees 18 and 22);
                // still counted as not parked, so that the settle looks at every slot.
                work.callers.entries[slot] = .held(continuation)
                return nil
            }
            work.unparked -= 1
            work.owed[slot] = nil
            work.callers.entries[slot] = .parked(continuation, consumes: false)
            // Heard now, unless a progress call is on its way: it then hears after that call.
            let heardNow = work.conclude(slot, with: result, droppingProgress: true) != nil
            return heardNow ? result : nil
        case .handler, .operation, .parked, .held, .gone:
            preconditionFailure("Machine: slot \(slot) is no caller waiting to park")
        }
    }

    // MARK: Progress

    /// Event: the work reports `progress`. Returns the slots whose delivery starts; the others have
    /// one on its way, which takes the latest value along (Guarantee 27).
    @usableFromInline mutating func report<Value>(_ progress: WorkProgress, for work: Work<Key, Value>)
        -> [(slot: Int, sink: ProgressSink)]
    {
        switch work.phase {
        case .running:
            break
        case .deciding, .ended, .stored:
            // Late, and expected: reported as the result was decided; nobody hears it (Guarantee 24).
            return []
        }
        work.progress = progress
        var starting: [(slot: Int, sink: ProgressSink)] = []
        for slot in work.calls.keys where work.callers.entries[slot].isOpen {
            work.calls[slot]!.latest = progress
            if !work.calls[slot]!.busy {
                work.calls[slot]!.busy = true
                starting.append((slot, work.calls[slot]!.sink))
            }
        }
        return starting
    }

    /// Event: a call to the caller in `slot` returned (or a delivery starts). Returns the next call
    /// to make: the latest progress, then the caller's last call, then nothing (Guarantee 24).
    @usableFromInline mutating func nextCall<Value>(_ work: Work<Key, Value>, slot: Int) -> NextCall<Value> {
        guard var call = work.calls[slot] else { return .none }
        if let progress = call.latest {
            call.latest = nil
            work.calls[slot] = call
            return .progress(progress, call.sink)
        }
        if let last = call.last {
            work.calls[slot] = nil
            return .last(last.caller, last.result)
        }
        call.busy = false
        work.calls[slot] = work.callers.entries[slot].isOpen ? call : nil
        return .none
    }

    // MARK: The end

    /// Event: the work's result is decided (it finished, was cancelled, or was abandoned), `now`
    /// on the coalescer's clock if it keeps time: counted and recorded now, handed to the callers
    /// at ``settle(_:with:)``. Nil if already decided. Inlinable, like ``settle(_:with:)``:
    /// unspecialized, each looked its types up at every end.
    @inlinable mutating func decide<Value>(
        _ work: Work<Key, Value>, with result: Result<Value, Error>, stopping: Bool, at now: Duration? = nil
    ) -> Decided<Value>? {
        switch work.phase {
        case .running:
            break
        case .deciding, .ended, .stored:
            // Late, and expected: finished as it was cancelled, or cancelled as it finished; the first
            // decision stands (Guarantee 2).
            return nil
        }
        let runner = work.runner
        work.phase = .deciding
        var stores = false
        // A prefetch that no consumer waits for keeps its value, indexed, for the next one.
        if work.isPrefetch, work.isIndexed, case .success(let value) = result, !work.callers.hasConsumer,
            let timeout = prefetchTimeout, let now
        {
            let expiry = now + timeout
            work.stored = value
            work.phase = .stored(until: expiry)
            nextExpiry = min(nextExpiry ?? expiry, expiry)
            stores = true
        } else {
            unindex(work)
        }
        let outcome = WorkOutcome(result)
        statistics.countEnd(outcome, served: work.live)
        let error: (any Error)? = if case .failure(let error) = result, outcome == .failed { error } else { nil }
        let duration = if let now, let startedAt = work.startedAt { now - startedAt } else { Duration.zero }
        record(
            .workEnded(
                key: work.key, work: work.number, outcome: outcome, error: error, callersServed: work.live,
                duration: duration))
        return Decided(runner: runner, stopping: stopping, stores: stores)
    }

    /// Event: the decided result is handed out. Returns the callers to serve with it now, and
    /// tasks held while the work was deciding with what they are owed; those with a call on its way
    /// hear after it, tasks not parked yet when they park.
    @inlinable mutating func settle<Value>(_ work: Work<Key, Value>, with result: Result<Value, Error>)
        -> Settled<Value>
    {
        switch work.phase {
        case .deciding:
            work.phase = .ended
        case .stored, .ended:
            // Stored for a consumer, who may have taken it already: its callers are served all the same.
            break
        case .running:
            preconditionFailure("Machine: work \(work.number) was settled before its result was decided")
        }
        var settled = Settled<Value>()
        guard work.unparked > 0 || !work.calls.isEmpty else {
            // Every slot is a caller waiting or one that left: the list is served whole.
            swap(&settled.callers, &work.callers)
            return settled
        }
        for slot in work.callers.entries.indices {
            guard case .held(let continuation) = work.callers.entries[slot] else {
                let caller = work.conclude(slot, with: result, droppingProgress: false)
                if let caller { _ = settled.callers.add(caller) }
                continue
            }
            // Held while the work was deciding: it hears what it is owed (a held task always is).
            guard let own = work.owed.removeValue(forKey: slot) else {
                preconditionFailure("Machine: the task in slot \(slot) was held with nothing owed")
            }
            work.unparked -= 1
            work.callers.entries[slot] = .parked(continuation, consumes: false)
            let heardNow = work.conclude(slot, with: own, droppingProgress: true) != nil
            if heardNow { settled.held.append(Owed(caller: .parked(continuation, consumes: false), result: own)) }
        }
        return settled
    }

    @inlinable mutating func unindex(_ work: AnyWork<Key>) {
        if work.isIndexed {
            // One lookup, not two: hashing the key is most of what this costs.
            if let entry = index.index(forKey: work.key), index.values[entry] === work { index.remove(at: entry) }
            work.isIndexed = false
        } else {
            forgotten[ObjectIdentifier(work)] = nil
        }
    }

    // MARK: Controls

    /// Event: every key that `matches` is forgotten: its work goes on, unindexed, and a result
    /// stored for it is dropped. Returns whether there was any.
    mutating func forget(where matches: (Key) -> Bool) -> Bool {
        var found = false
        for (key, work) in index where matches(key) {
            index[key] = nil
            work.isIndexed = false
            switch work.phase {
            case .running: forgotten[ObjectIdentifier(work)] = work
            case .stored: work.dropStored()
            case .deciding, .ended: preconditionFailure("Machine: decided work \(work.number) was still indexed")
            }
            found = true
        }
        return found
    }

    /// Event: everything under the keys that `matches` is cancelled (forgotten work too when
    /// `includingForgotten`) and stored results are dropped. Returns the work to decide as cancelled,
    /// and whether there was anything.
    mutating func cancelAll(where matches: (Key) -> Bool, includingForgotten: Bool) -> (
        works: [AnyWork<Key>], found: Bool
    ) {
        var works: [AnyWork<Key>] = []
        var dropped = false
        for (key, work) in index where matches(key) {
            switch work.phase {
            case .running:
                works.append(work)
            case .stored:
                index[key] = nil
                work.isIndexed = false
                work.dropStored()
                dropped = true
            case .deciding, .ended:
                preconditionFailure("Machine: decided work \(work.number) was still indexed")
            }
        }
        if includingForgotten { works += forgotten.values }
        return (works, !works.isEmpty || dropped)
    }

    /// Event: the stall threshold passed. Returns how many callers wait, recording the stall if any.
    mutating func stalled(_ work: AnyWork<Key>, after threshold: Duration) -> Int {
        guard case .running = work.phase, work.live > 0 else { return 0 }
        record(.workStalled(key: work.key, work: work.number, callers: work.live, elapsed: threshold))
        return work.live
    }

    // MARK: Priority

    /// Event: the caller in `slot` asks for `urgency` instead. Returns whether the work must follow;
    /// never for a caller that left, which took its urgency with it (Guarantee 19).
    @usableFromInline mutating func reprioritize<Value>(_ work: Work<Key, Value>, slot: Int?, to urgency: Urgency?)
        -> Bool
    {
        guard case .running = work.phase, let slot, work.callers.entries[slot].waits else { return false }
        // Both, whatever the first returns: the old urgency goes, the new one comes.
        let released = work.priority.release(slot)
        var raised = false
        if let urgency { raised = work.priority.demand(urgency, from: slot) }
        return raised || released
    }

    /// Event: the waiting task in `slot` was escalated to `priority`. Returns whether the work must
    /// follow; never for a caller that left.
    mutating func escalate<Value>(_ work: Work<Key, Value>, slot: Int, to priority: TaskPriority) -> Bool {
        guard case .running = work.phase, work.callers.entries[slot].waits else { return false }
        return work.priority.escalate(slot, to: priority)
    }

    /// Event: a thread offers to write the work's priority; returns whether it is the one to: no
    /// other thread is writing, and the work is in flight and has not started.
    mutating func claimWriting(_ work: AnyWork<Key>, _ writer: DispatchGroup) -> Bool {
        guard case .running = work.phase, work.priority.writer == nil, !work.priority.isFrozen else { return false }
        work.priority.writer = writer
        return true
    }

    /// Event: the writer asks what to write next; nil lets go of the right to write.
    mutating func nextPriority(of work: AnyWork<Key>) -> Urgency? {
        let next = work.priority.target
        guard case .running = work.phase, !work.priority.isFrozen, next != work.priority.applied else {
            work.priority.writer = nil
            return nil
        }
        work.priority.applied = next
        record(
            .priorityChanged(key: work.key, work: work.number, priority: next.event(rising: work.priority.risesOnly)))
        return next
    }

    /// Event: the work's operation starts; its priority moves no more. Returns whether the work is
    /// still in flight, and the write to wait for, if one is on its way.
    mutating func begin(_ work: AnyWork<Key>) -> (running: Bool, writer: DispatchGroup?) {
        work.priority.isFrozen = true
        if case .running = work.phase { return (true, work.priority.writer) }
        return (false, work.priority.writer)
    }

    /// Event: the app sets the operation's own priority, the floor under its callers'.
    mutating func setFloor(of work: AnyWork<Key>, _ change: (inout OperationPriority) -> Void) -> Bool {
        var own = work.priority.floor.operationPriority
        change(&own)
        work.priority.floor = Urgency(own)
        return !work.priority.isFrozen
    }

    // MARK: Prefetched results

    /// Event: a consumer arrives, `now`, and takes the value stored for `key`, counted as a caller
    /// who joined the prefetch and was served. Nil if none is stored.
    @usableFromInline mutating func takeStored<Value: Sendable>(_ key: Key, as _: Value.Type, at now: Duration)
        -> Value?
    {
        releaseExpired(at: now)
        guard let entry = index[key], case .stored = entry.phase else { return nil }
        let work = unsafeDowncast(entry, to: Work<Key, Value>.self)
        let value = work.stored
        index[key] = nil
        work.isIndexed = false
        work.dropStored()
        statistics.countArrival(joining: true)
        statistics.callersServed += 1
        return value
    }

    /// Whether a prefetched result waits for `key`, `now`.
    @usableFromInline mutating func hasStored(_ key: Key, at now: Duration) -> Bool {
        releaseExpired(at: now)
        if case .stored = index[key]?.phase { return true }
        return false
    }

    /// Event: time passed, to `now` (an expiry timer fired, or a caller arrived). Drops expired
    /// results; sweeps only once the earliest expiry has passed.
    @usableFromInline mutating func releaseExpired(at now: Duration) {
        guard let nextExpiry, now >= nextExpiry else { return }
        var earliest: Duration?
        for (key, work) in index {
            guard case .stored(let expiry) = work.phase else { continue }
            if expiry <= now {
                index[key] = nil
                work.isIndexed = false
                work.dropStored()
            } else {
                earliest = min(earliest ?? expiry, expiry)
            }
        }
        self.nextExpiry = earliest
    }
}

// MARK: - States

/// Where a work stands.
@usableFromInline enum Phase {
    /// In flight: callers join it, and its result is open.
    case running
    /// Its result is decided and on its way: the work is being stopped and its end reported.
    case deciding
    /// Its callers were handed the result.
    case ended
    /// A prefetched value waits for its consumer until `until` on the coalescer's clock (kept in
    /// ``Work/stored``).
    case stored(until: Duration)
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
    /// A task that has not parked yet, owed its last call (kept in ``Work/owed``, so that a slot
    /// never grows with `Value`): it hears as it parks.
    case owed
    /// A task that parked while its work was deciding, owed its last call: it hears at the settle.
    case held(UnsafeContinuation<Value, Error>)
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

// MARK: - Actions

/// What a join decided: the caller's slot, whether it raised the work's priority (to write), and
/// whether it is owed the latest progress (to deliver).
@usableFromInline struct Joined {
    @usableFromInline var slot: Int
    @usableFromInline var raised = false
    @usableFromInline var delivers = false

    @inlinable init(slot: Int, raised: Bool = false, delivers: Bool = false) {
        (self.slot, self.raised, self.delivers) = (slot, raised, delivers)
    }
}

/// What a withdrawal decided: the caller to tell now, the work's end if it was abandoned, and
/// whether the priority must follow.
@usableFromInline struct Withdrawn<Value: Sendable> {
    @usableFromInline var told: (Caller<Value>, Result<Value, Error>)?
    @usableFromInline var decided: Decided<Value>?
    @usableFromInline var reprioritizes = false

    @inlinable init() {}
}

/// What deciding a work's end asks for: its runner, to stop if `stopping`, then to let go of;
/// and, if it `stores` its value for a consumer, a timer for the value's expiry.
@usableFromInline struct Decided<Value: Sendable>: Sendable {
    @usableFromInline let runner: Runner<Value>
    @usableFromInline let stopping: Bool
    @usableFromInline let stores: Bool

    @inlinable init(runner: Runner<Value>, stopping: Bool, stores: Bool = false) {
        self.runner = runner
        self.stopping = stopping
        self.stores = stores
    }
}

/// What settling a work hands out: its callers, served with its result, and tasks that parked
/// while it was deciding, each with what it is owed.
@usableFromInline struct Settled<Value: Sendable> {
    @usableFromInline var callers = Callers<Value>()
    @usableFromInline var held: [Owed<Value>] = []

    @inlinable init() {}
}

/// A caller and the last call it is owed. (A struct, not a tuple: a generic tuple's metadata is
/// looked up at run time, which cost every new work ~850 instructions.)
@usableFromInline struct Owed<Value: Sendable> {
    @usableFromInline let caller: Caller<Value>
    @usableFromInline let result: Result<Value, Error>

    @inlinable init(caller: Caller<Value>, result: Result<Value, Error>) {
        (self.caller, self.result) = (caller, result)
    }
}

/// What a caller with progress hears next.
@usableFromInline enum NextCall<Value: Sendable> {
    case progress(WorkProgress, ProgressSink)
    case last(Caller<Value>, Result<Value, Error>)
    case none
}
