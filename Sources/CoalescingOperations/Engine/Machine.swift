import Foundation

/// The engine's state machine: which work is in flight under which key, where each work stands
/// (``Phase``), where each of its callers stands (``Caller``), and what is owed to whom.
///
/// Each work's state is one value, ``WorkState`` (Work.swift), held by the work's object so that
/// callers and operations can name it; the machine alone changes it. The machine's parts live
/// beside what they are about: the arrival events in Arrival.swift, the steps of one caller's
/// slot in Work.swift, the priority in Priority.swift, the delivery of events in Observing.swift,
/// and the deprecated hand-join's one step of its own in Deprecations.swift.
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
    @usableFromInline var index = WorkIndex<Key>()
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

    /// The work a new caller of `key`, whose hash is `hash`, joins, if any.
    @inlinable func inFlight<Value>(_ key: Key, hash: Int, as _: Value.Type) -> Work<Key, Value>? {
        // Every work under a key has the key's `Value` type: the operations' keys include it, and
        // a task coalescer has one.
        guard let entry = index.work(for: key, hash: hash) else { return nil }
        let work = unsafeDowncast(entry, to: Work<Key, Value>.self)
        switch work.state.phase {
        case .running: return work
        case .stored: return nil
        case .deciding, .ended: preconditionFailure("Machine: decided work \(work.number) was still indexed")
        }
    }

    /// New work under `key`, whose hash is `hash`, numbered as the next to start; nothing knows of it
    /// until ``start(_:)``.
    @inlinable func newWork<Value>(
        _ key: Key, hash: Int, runner: Runner<Value>, policy: AbandonedWorkPolicy, floor: Urgency, at now: Duration?
    ) -> Work<Key, Value> {
        Work(
            key: key, hash: hash, number: statistics.workStarted + 1, runner: runner, policy: policy, floor: floor,
            startedAt: now)
    }

    /// The step of an arrival that starts new work: it is indexed under its key, counted, recorded.
    @inlinable mutating func start<Value>(_ work: Work<Key, Value>) {
        index.insert(work)
        let number = statistics.countStart()
        precondition(number == work.number, "Machine: work \(work.number) started as number \(number)")
        record(.workStarted(key: work.key, work: work.number))
    }

    /// The step of every arrival that puts a caller in a work in flight. The first to arrive
    /// started it, every later one joins it. Only a caller counts, and only a caller's urgency
    /// moves the work (Guarantee 19).
    @inlinable mutating func join<Value>(
        _ work: Work<Key, Value>, _ caller: Caller<Value>, asking urgency: Urgency?, watching sink: ProgressSink? = nil
    ) -> Entry<Key, Value> {
        switch work.state.phase {
        case .running: break
        case .deciding, .stored, .ended: preconditionFailure("Machine: a caller joined decided work \(work.number)")
        }
        let slot = work.state.callers.add(caller)
        var entry = Entry(work, slot: slot)
        guard caller.waits else { return entry }
        if let urgency { entry.raised = work.state.demand(urgency, from: slot) }
        if let sink { entry.delivers = work.state.watch(sink, in: slot) }
        if case .arriving = caller { work.state.callers.unparked += 1 }
        work.state.callers.live += 1
        let joining = work.state.callers.arrivals > 0
        statistics.countArrival(joining: joining)
        if joining { record(.callerJoined(key: work.key, work: work.number, callers: work.state.callers.live)) }
        work.state.callers.arrivals += 1
        return entry
    }

    // MARK: Leaving

    /// Event: the caller in `slot` withdraws or times out, hearing its error, or (a joined
    /// operation finished by hand) `result`. Nil `slot` stands for the operation that started the
    /// work with no caller of its own: it abandons the work only if nobody waits. When the last
    /// caller leaves, the work follows its ``AbandonedWorkPolicy``, abandoned `now` on the
    /// coalescer's clock if it keeps time.
    @usableFromInline mutating func withdraw<Value>(
        _ work: Work<Key, Value>, slot: Int?, reason: WithdrawalReason, hearing result: Result<Value, Error>?,
        at now: Duration?
    ) -> Withdrawal<Value> {
        switch work.state.phase {
        case .running:
            break
        case .deciding, .stored, .ended:
            // Late, and expected: the caller left (its timeout fired, its task or operation was
            // cancelled) as or after the result was decided, which is its last call (Guarantee 17).
            return .late
        }
        var told: Owed<Value>?
        var reprioritizes = false
        var waited = true
        if let slot {
            let caller = work.state.callers.entries[slot].caller
            // Late too: it heard, or is owed, its last call already.
            guard caller.isOpen else { return .late }
            waited = caller.waits
            if waited {
                work.state.callers.live -= 1
                statistics.countDeparture(reason)
                record(.callerWithdrawn(key: work.key, work: work.number, reason: reason))
            }
            reprioritizes = work.state.release(slot)
            let heard = result ?? .failure(reason.error)
            let hearsNow = work.state.conclude(slot, with: heard, droppingProgress: true)
            if let hearsNow { told = Owed(caller: hearsNow, result: heard) }
        }
        guard waited, work.state.callers.live == 0, work.policy == .cancel else {
            return .left(told, reprioritizes: reprioritizes)
        }
        let decision = decide(work, with: .failure(CoalescingError.cancelled), stopping: true, at: now)
        guard case .ends(let decided) = decision else {
            preconditionFailure("Machine: work \(work.number) in flight was not decided")
        }
        return .abandoned(decided, told)
    }

    /// Event: the caller in `slot`, a task, parks its continuation. It resumes at once if it is
    /// owed its last call and no call to it is on its way. Inlinable: unspecialized, it looked its
    /// types up at run time for every waiter.
    @inlinable mutating func park<Value>(
        _ work: Work<Key, Value>, _ continuation: UnsafeContinuation<Value, Error>, in slot: Int
    ) -> Parking<Value> {
        switch work.state.callers.entries[slot].caller {
        case .arriving(let consumes):
            work.state.callers.unparked -= 1
            work.state.callers.entries[slot].caller = .parked(continuation, consumes: consumes)
            return .waits
        case .owed(let result):
            switch work.state.phase {
            case .deciding:
                // It hears at the settle, after the stop and the events (Guarantees 18 and 22);
                // still counted as not parked, so that the settle looks at every slot.
                work.state.callers.entries[slot].caller = .held(continuation, owed: result)
                return .waits
            case .running, .stored, .ended:
                break
            }
            let hearsNow = work.state.parkOwed(continuation, in: slot, owed: result)
            guard hearsNow else { return .waits }
            return .resumes(result)
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
        var starting: [(slot: Int, sink: ProgressSink)] = []
        switch work.state.phase {
        case .running:
            break
        case .deciding, .stored, .ended:
            // Late, and expected: reported as the result was decided; nobody hears it (Guarantee 24).
            return starting
        }
        work.state.progress = progress
        for slot in work.state.calls.keys where work.state.callers.entries[slot].caller.isOpen {
            work.state.calls[slot]!.latest = progress
            if !work.state.calls[slot]!.busy {
                work.state.calls[slot]!.busy = true
                starting.append((slot, work.state.calls[slot]!.sink))
            }
        }
        return starting
    }

    /// Event: a call to the caller in `slot` returned (or a delivery starts). Returns the next call
    /// to make: the latest progress, then the caller's last call, then nothing (Guarantee 24).
    /// Phase-free: a caller's calls run their course, one at a time, whatever the work's phase;
    /// its last call is decided, and its slot closed, before it is queued here.
    @usableFromInline mutating func nextCall<Value>(_ work: Work<Key, Value>, slot: Int) -> NextCall<Value> {
        guard var call = work.state.calls[slot] else { return .none }
        if let progress = call.latest {
            call.latest = nil
            work.state.calls[slot] = call
            return .progress(progress, call.sink)
        }
        if let last = call.last {
            work.state.calls[slot] = nil
            return .last(last.caller, last.result)
        }
        call.busy = false
        if work.state.callers.entries[slot].caller.isOpen {
            work.state.calls[slot] = call
        } else {
            work.state.calls[slot] = nil
        }
        return .none
    }

    // MARK: The end

    /// Event: the work's result is decided (it finished, was cancelled, or was abandoned), `now`
    /// on the coalescer's clock if it keeps time: counted and recorded now, handed to the callers
    /// at ``settle(_:with:)``. Inlinable, like ``settle(_:with:)``: unspecialized, each looked its
    /// types up at every end.
    @inlinable mutating func decide<Value>(
        _ work: Work<Key, Value>, with result: Result<Value, Error>, stopping: Bool, at now: Duration? = nil
    ) -> Decision<Value> {
        switch work.state.phase {
        case .running:
            break
        case .deciding, .stored, .ended:
            // Late, and expected: finished as it was cancelled, or cancelled as it finished; the first
            // decision stands (Guarantee 2).
            return .late
        }
        var storing: DispatchGroup?
        // A prefetch that no consumer waits for keeps its value, indexed, for the next one.
        if work.state.isPrefetch, case .success(let value) = result, let timeout = prefetchTimeout, let now,
            index.work(for: work.key, hash: work.hash) === work, !work.state.callers.hasConsumer
        {
            let expiry = now + timeout
            work.state.phase = .stored(value, until: expiry)
            nextExpiry = min(nextExpiry ?? expiry, expiry)
            // The task's hold on the value, until it is out of its end, when the storage leaves it:
            // a drop waits for it (Guarantee 15). Entered here, so that no drop finds it open.
            let hold = DispatchGroup()
            hold.enter()
            work.state.storing = hold
            storing = hold
        } else {
            work.state.phase = .deciding
            unindex(work)
        }
        let outcome = WorkOutcome(result)
        let served = work.state.callers.live
        statistics.countEnd(outcome, served: served)
        let error: (any Error)? = if case .failure(let error) = result, outcome == .failed { error } else { nil }
        let duration = if let now, let startedAt = work.startedAt { now - startedAt } else { Duration.zero }
        record(
            .workEnded(
                key: work.key, work: work.number, outcome: outcome, error: error, callersServed: served,
                duration: duration))
        return .ends(Decided(runner: work.state.runner, stopping: stopping, storing: storing))
    }

    /// Event: the decided result is handed out. Returns the callers to serve with it now, and
    /// tasks held while the work was deciding with what they are owed; those with a call on its way
    /// hear after it, tasks not parked yet when they park.
    @inlinable mutating func settle<Value>(_ work: Work<Key, Value>, with result: Result<Value, Error>)
        -> Settled<Value>
    {
        switch work.state.phase {
        case .deciding:
            work.state.phase = .ended
        case .stored, .ended:
            // Stored for a consumer, who may have taken it already: its callers are served all the same.
            break
        case .running:
            preconditionFailure("Machine: work \(work.number) was settled before its result was decided")
        }
        var settled = Settled<Value>()
        guard work.state.callers.unparked > 0 || !work.state.calls.isEmpty else {
            // Every slot is a caller waiting or one that left: the list is served whole.
            swap(&settled.callers, &work.state.callers)
            return settled
        }
        for slot in work.state.callers.entries.indices {
            guard case .held(let continuation, let own) = work.state.callers.entries[slot].caller else {
                let caller = work.state.conclude(slot, with: result, droppingProgress: false)
                if let caller { _ = settled.callers.add(caller) }
                continue
            }
            // Held while the work was deciding: it hears what it is owed.
            let hearsNow = work.state.parkOwed(continuation, in: slot, owed: own)
            if hearsNow {
                settled.held.append(Owed(caller: .parked(continuation, consumes: false), result: own))
            }
        }
        return settled
    }

    /// Takes decided or forgotten work out of the index, if it still holds it, or out of the
    /// forgotten work.
    @inlinable mutating func unindex(_ work: AnyWork<Key>) {
        if !index.remove(work) { forgotten[ObjectIdentifier(work)] = nil }
    }

    // MARK: Controls

    /// Event: every key that `matches` is forgotten: its work goes on, unindexed, and a result
    /// stored for it is dropped.
    mutating func forget(where matches: (Key) -> Bool) -> Dropped<Key> {
        var dropped = Dropped<Key>()
        for work in index.works where matches(work.key) {
            index.remove(work)
            switch work.stage {
            case .running: forgotten[ObjectIdentifier(work)] = work
            case .stored: dropped.holds.append(work.dropStored())
            case .deciding, .ended: preconditionFailure("Machine: decided work \(work.number) was still indexed")
            }
            dropped.found = true
        }
        return dropped
    }

    /// Event: everything under the keys that `matches` is cancelled (forgotten work too when
    /// `includingForgotten`) and stored results are dropped.
    mutating func cancelAll(where matches: (Key) -> Bool, includingForgotten: Bool) -> Dropped<Key> {
        var cancelled = Dropped<Key>()
        for work in index.works where matches(work.key) {
            switch work.stage {
            case .running:
                cancelled.works.append(work)
            case .stored:
                index.remove(work)
                cancelled.holds.append(work.dropStored())
                cancelled.found = true
            case .deciding, .ended:
                preconditionFailure("Machine: decided work \(work.number) was still indexed")
            }
        }
        if includingForgotten { cancelled.works += forgotten.values }
        if !cancelled.works.isEmpty { cancelled.found = true }
        return cancelled
    }

    /// Event: the stall threshold passed since `work` started.
    mutating func stalled<Value>(_ work: Work<Key, Value>, after threshold: Duration) -> Stall {
        // Reported while it runs with callers waiting; quiet if nobody waits, or it ended in time.
        guard case .running = work.state.phase, work.state.callers.live > 0 else { return .quiet }
        record(.workStalled(key: work.key, work: work.number, callers: work.state.callers.live, elapsed: threshold))
        return .reported(callers: work.state.callers.live)
    }

    // MARK: Priority

    /// Event: the caller in `slot` asks for `urgency` instead; never for a caller that left, which
    /// took its urgency with it (Guarantee 19), or the operation's missing caller (nil).
    @usableFromInline mutating func reprioritize<Value>(_ work: Work<Key, Value>, slot: Int?, to urgency: Urgency?)
        -> Reprioritization
    {
        guard let slot, case .running = work.state.phase, work.state.callers.entries[slot].caller.waits else {
            return .stays
        }
        // Both, whatever the first returns: the old urgency goes, the new one comes.
        let released = work.state.release(slot)
        var raised = false
        if let urgency { raised = work.state.demand(urgency, from: slot) }
        return Reprioritization(writes: raised || released)
    }

    /// Event: the waiting task in `slot` was escalated to `priority`; never for a caller that left.
    mutating func escalate<Value>(_ work: Work<Key, Value>, slot: Int, to priority: TaskPriority) -> Reprioritization {
        guard case .running = work.state.phase, work.state.callers.entries[slot].caller.waits else { return .stays }
        let raised = work.state.escalate(slot, to: priority)
        return Reprioritization(writes: raised)
    }

    /// Event: the app sets the operation's own priority, the floor under its callers'. Recorded
    /// whatever the phase; written only while the work is in flight and has not started.
    mutating func setFloor<Value>(of work: Work<Key, Value>, _ change: (inout OperationPriority) -> Void)
        -> Reprioritization
    {
        var own = work.state.priority.floor.operationPriority
        change(&own)
        work.state.priority.floor = Urgency(own)
        switch work.state.phase {
        case .running: return Reprioritization(writes: !work.state.priority.isFrozen)
        case .deciding, .stored, .ended: return .stays
        }
    }

    /// Event: a thread offers to write the work's priority. It writes if no other thread is
    /// writing, and the work is in flight and has not started: it gets the group that an
    /// operation's start waits on, made only then, so that a write that loses costs no allocation.
    @inlinable mutating func claimWriting<Value>(_ work: Work<Key, Value>) -> DispatchGroup? {
        guard case .running = work.state.phase, work.state.priority.writer == nil, !work.state.priority.isFrozen
        else { return nil }
        let writer = DispatchGroup()
        work.state.priority.writer = writer
        return writer
    }

    /// Event: the writer asks what to write next; `done` lets go of the right to write.
    @inlinable mutating func nextPriority<Value>(of work: Work<Key, Value>) -> NextWrite<Value> {
        let next = work.state.target
        guard case .running = work.state.phase, !work.state.priority.isFrozen, next != work.state.priority.applied
        else {
            work.state.priority.writer = nil
            return .done
        }
        work.state.priority.applied = next
        let priority = next.event(rising: work.state.priority.risesOnly)
        record(.priorityChanged(key: work.key, work: work.number, priority: priority))
        return .write(next, to: work.state.runner)
    }

    /// Event: the work's operation starts; its priority moves no more. It runs only if the work
    /// is in flight, after the write on its way, if any.
    @inlinable mutating func begin<Value>(_ work: Work<Key, Value>) -> Begun {
        work.state.priority.isFrozen = true
        switch work.state.phase {
        case .running: return Begun(runs: true, after: work.state.priority.writer)
        case .deciding, .stored, .ended: return Begun(runs: false, after: work.state.priority.writer)
        }
    }

    // MARK: Prefetched results

    /// The step of a consumer's arrival that takes `work`'s stored value: counted as a caller who
    /// joined the prefetch and was served.
    @usableFromInline mutating func take<Value>(storedIn work: Work<Key, Value>) {
        index.remove(work)
        work.state.phase = .ended
        statistics.countArrival(joining: true)
        statistics.callersServed += 1
    }

    /// Event: time passed, to `now` (an expiry timer fired, or a caller arrived). Drops expired
    /// results; sweeps only once the earliest expiry has passed.
    @usableFromInline mutating func releaseExpired(at now: Duration) {
        guard let nextExpiry, now >= nextExpiry else { return }
        var earliest: Duration?
        for work in index.works {
            switch work.stage {
            case .stored(let expiry) where expiry <= now:
                index.remove(work)
                // Past its expiry, the task that stored it has long been out of its end.
                _ = work.dropStored()
            case .stored(let expiry):
                earliest = min(earliest ?? expiry, expiry)
            case .running, .deciding, .ended:
                break
            }
        }
        self.nextExpiry = earliest
    }
}

// MARK: - Actions

/// What a withdrawal decided.
@usableFromInline enum Withdrawal<Value: Sendable> {
    /// The result was decided first, or the caller had its last call: nothing to do.
    case late
    /// The caller left: the caller owed a call now, if any, hears; the work's priority follows
    /// if `reprioritizes`.
    case left(Owed<Value>?, reprioritizes: Bool)
    /// The last caller left work to cancel: the work stops, then the caller hears, then the
    /// work's end is announced (Guarantee 18).
    case abandoned(Decided<Value>, Owed<Value>?)
}

/// What parking a task decided: it waits, or resumes at once with what it is owed.
@usableFromInline enum Parking<Value: Sendable> {
    case waits
    case resumes(Result<Value, Error>)
}

/// What deciding a work's end found.
@usableFromInline enum Decision<Value: Sendable> {
    /// Decided now: the end to carry out.
    case ends(Decided<Value>)
    /// Late: the result was decided before, and nothing changes.
    case late
}

/// What deciding a work's end asks for: its runner, to stop if `stopping`, then to let go of;
/// and, if it stores its value for a consumer, a timer for the value's expiry, and `storing`, the
/// hold of the task that stored it, which the task leaves once it holds nothing of the value.
@usableFromInline struct Decided<Value: Sendable>: Sendable {
    @usableFromInline let runner: Runner<Value>
    @usableFromInline let stopping: Bool
    @usableFromInline let storing: DispatchGroup?

    @inlinable init(runner: Runner<Value>, stopping: Bool, storing: DispatchGroup? = nil) {
        self.runner = runner
        self.stopping = stopping
        self.storing = storing
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

/// What cancelling or forgetting by key decided: the work to decide as cancelled (none when
/// forgetting), whether anything, work or a stored result, was found, and the holds on the dropped
/// results to wait for (Guarantee 15).
struct Dropped<Key: Hashable & Sendable> {
    var works: [AnyWork<Key>] = []
    var found = false
    var holds: [DispatchGroup?] = []
}

/// What a change under a work's priority decided (a caller's urgency, a task's escalation, the
/// app's floor): the work's priority is written, or stays as it is.
@usableFromInline enum Reprioritization {
    case writes
    case stays

    @inlinable init(writes: Bool) { self = writes ? .writes : .stays }
}

/// What the stall threshold's passing decided: nothing, or a stall reported with its callers.
enum Stall {
    case quiet
    case reported(callers: Int)
}

/// What the writer writes next: an urgency to whatever runs the work, or nothing, letting go.
@usableFromInline enum NextWrite<Value: Sendable> {
    case write(Urgency, to: Runner<Value>)
    case done
}

/// What an operation's start decided: whether it runs its work (or skips it, the result was
/// decided), once the priority write on its way, if any, is done.
@usableFromInline struct Begun {
    @usableFromInline let runs: Bool
    @usableFromInline let after: DispatchGroup?

    @inlinable init(runs: Bool, after: DispatchGroup?) { (self.runs, self.after) = (runs, after) }
}
