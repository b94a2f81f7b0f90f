import Foundation

/// The one engine under both halves: the storage that holds a ``Machine`` behind its lock, sends
/// it the events and carries out what it decides.
///
/// ``OperationQueueManager`` and the two task coalescers are front-ends over it: they say who the
/// caller is (a handler on a queue, a joined operation, a waiting task) and what runs the work
/// (an operation on a queue, a detached task); they never take the lock. Every entry point here
/// takes the lock once for an event, releases it, then acts: it stops work, tells callers,
/// delivers events and progress, writes priorities. No user code, continuation, KVO notification
/// or observer ever runs under the lock.
///
/// The lock order: this engine's lock, then an operation's one lock (`lifecycle`, which also
/// guards its `link` and its handler), never the other way round; no path holds more than these
/// two.
@usableFromInline final class Engine<Key: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: `state`'s lock guards the machine and the `var`s of every work it holds; the rest
    // is immutable.
    /// The machine behind its lock. Internal, not private, only so that the inlinable join paths
    /// are specialized in the caller's module: no other file takes it (`.ci/run` checks).
    @usableFromInline let state: LockedState<Machine<Key>>
    /// Receives the events, one at a time and in order; nil records none.
    @usableFromInline let observer: (@Sendable (CoalescingEvent<Key>) -> Void)?
    /// How long work may stay in flight with callers waiting before it is reported.
    let stallThreshold: Duration?
    /// How long a prefetched result waits for its consumer; nil where nothing is stored.
    let prefetchTimeout: Duration?
    /// The clock the timers run on and the events' time is read from.
    @usableFromInline let clock: EngineClock
    /// Whether events need the time: durations for an observer, expiry for stored results. The
    /// clock is read only then, and never under the lock.
    @usableFromInline let keepsTime: Bool

    init(
        observer: (@Sendable (CoalescingEvent<Key>) -> Void)?, stallThreshold: Duration?,
        prefetchTimeout: Duration? = nil, clock: EngineClock
    ) {
        self.observer = observer
        self.stallThreshold = stallThreshold
        self.prefetchTimeout = prefetchTimeout
        self.clock = clock
        keepsTime = observer != nil || prefetchTimeout != nil
        state = LockedState(Machine(observed: observer != nil, prefetchTimeout: prefetchTimeout))
    }

    /// The time on the clock, if events need it.
    @inlinable func time() -> Duration? { keepsTime ? clock.now() : nil }

    var statistics: CoalescingStatistics { state.withLock { $0.statistics } }

    // MARK: Arriving

    /// A caller arrives with `key`: it joins the work in flight, if any.
    @inlinable func join<Value>(
        _ key: Key, _ caller: Caller<Value>, asking urgency: Urgency?, watching sink: ProgressSink?
    ) -> Entry<Key, Value>? {
        state.withLock { $0.join(key, caller, asking: urgency, watching: sink) }
    }

    /// Registers a caller of `key`, a task at `callerPriority`: takes a stored result, joins the
    /// work in flight for it, or starts `operation` in a task of its own. Never suspends, so
    /// concurrent callers always find each other.
    ///
    /// Inlinable, like the rest of the join path, so that it is specialized for the caller's `Key`
    /// and `Value`: unspecialized, every join looked up generic metadata at run time. Never inlined:
    /// inlined into the async caller, its locals joined the caller's async frame, which then
    /// outgrew the task's first slab and cost every waiter an allocation.
    @inlinable @inline(never) func arrive<Value: Sendable>(
        key: Key,
        as role: CallerRole,
        at callerPriority: TaskPriority,
        priority: TaskPriority?,
        name: String?,
        timeout: Duration?,
        whenAbandoned: AbandonedWorkPolicy,
        progress: (@Sendable (WorkProgress) -> Void)? = nil,
        operation: @escaping @Sendable () async throws -> Value
    ) -> Arrival<Key, Value> {
        let sink = progress.map { ProgressSink(queue: nil, onProgress: $0) }
        let startPriority = priority ?? callerPriority
        let now = time()
        let arrival = state.withLock { machine -> Arrival<Key, Value> in
            let arrival: Arrival<Key, Value> = machine.arrive(
                key, as: role, at: callerPriority, starting: startPriority, policy: whenAbandoned, watching: sink,
                at: now)
            guard case .starts(let entry) = arrival else { return arrival }
            let work = entry.work
            // Created under the lock, so that its end cannot overtake this arrival.
            let task = startTask(for: work, name: name, priority: startPriority) { [self] in
                let stored: Decided<Value>?
                do {
                    stored = endUnlessStored(work, with: .success(try await operation()))
                } catch {
                    stored = endUnlessStored(work, with: .failure(error))
                }
                // Carried out once this task holds nothing of the value: the prefetchers hear
                // that it is stored, and nothing on their way keeps it; a drop of the value waits
                // for this task's hold on it, left only now (Guarantee 15).
                if let stored {
                    stored.storing?.leave()
                    carryOut(.ends(stored), of: work, with: .failure(StoredForAConsumer()))
                }
            }
            machine.assign(task, to: work)
            return arrival
        }
        switch arrival {
        case .joins(let entry), .starts(let entry): follow(entry, timeout: timeout, sink: sink)
        case .taken, .alreadyStored: deliverEvents()
        }
        return arrival
    }

    /// What follows every arrival once the lock is released: new work is watched for stalls, the
    /// caller's timeout armed, the work's priority raised, the latest progress delivered, the
    /// events delivered. Only a caller that asked for a deadline, or for progress, pays for it.
    @inlinable func follow<Value>(_ entry: Entry<Key, Value>, timeout: Duration?, sink: ProgressSink? = nil) {
        if entry.started { watchForStall(entry.work) }
        if let timeout { armTimeout(entry.work, slot: entry.slot, after: timeout) }
        if entry.raised { applyPriority(of: entry.work) }
        if entry.delivers, let slot = entry.slot, let sink { deliverCalls(to: slot, of: entry.work, via: sink) }
        deliverEvents()
    }

    // MARK: Leaving and ending

    /// The caller in `slot` of `work` withdraws (or, a joined operation finished by hand, hears
    /// `result`). If it abandons the work, the work stops before the caller hears (Guarantee 18).
    @usableFromInline func withdraw<Value>(
        _ work: Work<Key, Value>, slot: Int?, reason: WithdrawalReason, hearing result: Result<Value, Error>? = nil
    ) {
        // Read before locking, as for any end: abandoned work reports how long it ran.
        let now = time()
        let withdrawal = state.withLock { $0.withdraw(work, slot: slot, reason: reason, hearing: result, at: now) }
        switch withdrawal {
        case .late:
            break
        case .left(let told, let reprioritizes):
            told?.tell()
            deliverEvents()
            if reprioritizes { applyPriority(of: work) }
        case .abandoned(let decided, let told):
            stop(decided)
            told?.tell()
            announceEnd(work, decided, with: .failure(CoalescingError.cancelled))
        }
    }

    /// Ends a task's `work` with `result`, unless it stores its value for a consumer: that end is
    /// returned, to carry out once the caller has let go of the value.
    @inlinable func endUnlessStored<Value>(_ work: Work<Key, Value>, with result: Result<Value, Error>)
        -> Decided<Value>?
    {
        let decision = decide(work, with: result)
        guard case .ends(let decided) = decision, decided.storing != nil else {
            carryOut(decision, of: work, with: result)
            return nil
        }
        return decided
    }

    /// The first half of an end: decides `work`'s result, unless it was decided already (late).
    /// The operation that runs the work tells Foundation of its cancellation between the halves.
    @inlinable func decide<Value>(
        _ work: Work<Key, Value>, with result: Result<Value, Error>, stopping: Bool = false
    ) -> Decision<Value> {
        let now = time()
        return state.withLock { $0.decide(work, with: result, stopping: stopping, at: now) }
    }

    /// The second half of an end: the work stops, then its callers hear; a value stored for a
    /// consumer has its expiry armed.
    @inlinable func carryOut<Value>(
        _ decision: Decision<Value>, of work: Work<Key, Value>, with result: Result<Value, Error>
    ) {
        guard case .ends(let decided) = decision else { return }
        stop(decided)
        announceEnd(work, decided, with: result)
        if decided.storing != nil { armExpiry() }
    }

    /// The first steps of a decided end: the operation that runs the work lets go of it, so that
    /// its `cancel()` does not come back here; cancelled work sees it before anyone hears.
    @inlinable func stop<Value>(_ decided: Decided<Value>) {
        if case .operation(let operation) = decided.runner { operation.unlink() }
        if decided.stopping { decided.runner.stop() }
    }

    /// A decided end's event is delivered, then its result settled (Guarantee 22): here, or on the
    /// thread already delivering events.
    @inlinable func announceEnd<Value>(
        _ work: Work<Key, Value>, _ decided: Decided<Value>, with result: Result<Value, Error>
    ) {
        if observer == nil {
            settle(work, decided.runner, with: result)
        } else {
            deliverRecordedEvents { [self] in settle(work, decided.runner, with: result) }
        }
    }

    /// The last steps of a decided end (the machine's ``Machine/settle(_:with:)``): the callers
    /// are collected (joined operations finish), the operation that ran the work finishes, then
    /// the callers hear.
    @inlinable func settle<Value>(_ work: Work<Key, Value>, _ runner: Runner<Value>, with result: Result<Value, Error>)
    {
        let settled = state.withLock { $0.settle(work, with: result) }
        var delivery = Delivery<Value>()
        delivery.add(settled.callers)
        if case .operation(let operation) = runner { operation.resultDecided() }
        delivery.deliver(result)
        for owed in settled.held { owed.tell() }
    }

    /// Cancels the work under every key that `matches`, forgotten work included when
    /// `includingForgotten`, and drops stored results; returns whether there was any.
    func cancelAll(where matches: (Key) -> Bool, includingForgotten: Bool) -> Bool {
        let cancelled = state.withLock { $0.cancelAll(where: matches, includingForgotten: includingForgotten) }
        return carryOut(cancelled)
    }

    /// Forgets the work in flight under every key that `matches`, and drops stored results;
    /// returns whether there was any.
    func forget(where matches: (Key) -> Bool) -> Bool {
        let forgotten = state.withLock { $0.forget(where: matches) }
        return carryOut(forgotten)
    }

    /// Carries out a cancel or a forget by key: the work cancelled ends, its events are delivered,
    /// and the call returns, saying whether anything was found, once the tasks that stored the
    /// dropped values hold nothing of them (Guarantee 15).
    private func carryOut(_ dropped: Dropped<Key>) -> Bool {
        for work in dropped.works { work.cancel(in: self) }
        deliverEvents()
        // The tasks that stored the dropped values run no user code before they let go of them.
        for case let hold? in dropped.holds { hold.wait() }
        return dropped.found
    }

    // MARK: Progress

    /// The work reports `progress`: every caller that asked for it hears, one call at a time.
    @usableFromInline func report<Value>(_ progress: WorkProgress, for work: Work<Key, Value>) {
        let starting = state.withLock { $0.report(progress, for: work) }
        for (slot, sink) in starting {
            deliverCalls(to: slot, of: work, via: sink)
        }
    }

    /// Makes the calls owed to the caller in `slot`, on its queue, until none is left.
    @usableFromInline func deliverCalls<Value>(to slot: Int, of work: Work<Key, Value>, via sink: ProgressSink) {
        if let queue = sink.queue {
            queue.addOperation(DeliveryOperation { self.makeCalls(to: slot, of: work) })
        } else if sink.onMainActor {
            Task { @MainActor in self.makeCalls(to: slot, of: work) }
        } else {
            makeCalls(to: slot, of: work)
        }
    }

    private func makeCalls<Value>(to slot: Int, of work: Work<Key, Value>) {
        while true {
            let next = state.withLock { $0.nextCall(work, slot: slot) }
            switch next {
            case .progress(let progress, let sink): sink.onProgress(progress)
            case .last(let caller, let result): return caller.tell(result)
            case .none: return
            }
        }
    }

    // MARK: Waiting tasks

    /// Waits in `slot` for `work`'s result. A task cancelled meanwhile withdraws its caller at
    /// once, and a task escalated since it arrived at `arrivedAt`, or while it waits, raises the
    /// work's priority (on runtimes that can tell, Swift 6.2 and later).
    ///
    /// Kept flat: each level of async calls takes frame space from the waiting task, and one level
    /// more made every waiter outgrow its task's first slab, an allocation each.
    @inlinable func wait<Value>(
        for work: Work<Key, Value>, in slot: Int, arrivedAt: TaskPriority? = nil
    ) async throws -> Value {
        #if compiler(>=6.2)
        if #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) {
            return try await withTaskPriorityEscalationHandler {
                // An escalation between arriving and installing the handler is not reported to it.
                if let arrivedAt, Task.currentPriority > arrivedAt {
                    escalate(work, slot: slot, to: Task.currentPriority)
                }
                return try await park(in: work, slot: slot)
            } onPriorityEscalated: { [self] _, raised in
                escalate(work, slot: slot, to: raised)
            }
        }
        #endif
        return try await park(in: work, slot: slot)
    }

    @inlinable func park<Value>(in work: Work<Key, Value>, slot: Int) async throws -> Value {
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Value, Error>) in
                let parking = state.withLock { $0.park(work, continuation, in: slot) }
                switch parking {
                case .waits: break
                case .resumes(let result): continuation.resume(with: result)
                }
            }
        } onCancel: {
            withdraw(work, slot: slot, reason: .withdrawn)
        }
    }

    // MARK: Priority

    /// Changes the urgency the caller in `slot` asks for; nothing once it has left (Guarantee 19).
    @usableFromInline func reprioritize<Value>(_ work: Work<Key, Value>, slot: Int?, to urgency: Urgency?) {
        let reprioritization = state.withLock { $0.reprioritize(work, slot: slot, to: urgency) }
        if case .writes = reprioritization { applyPriority(of: work) }
    }

    /// A waiting task caller was escalated to `priority`.
    @usableFromInline func escalate<Value>(_ work: Work<Key, Value>, slot: Int, to priority: TaskPriority) {
        let escalation = state.withLock { $0.escalate(work, slot: slot, to: priority) }
        if case .writes = escalation { applyPriority(of: work) }
    }

    /// Sets the floor under the callers' priorities: what the app set on the operation itself.
    func setFloor<Value>(of work: Work<Key, Value>, _ change: (inout OperationPriority) -> Void) {
        let floorChange = state.withLock { $0.setFloor(of: work, change) }
        if case .writes = floorChange { applyPriority(of: work) }
    }

    /// Writes the work's priority to whatever runs it until it matches what its callers ask.
    ///
    /// One thread writes at a time; the others only change the target, which the writer picks
    /// up before it lets go. An operation's start waits for a write in progress, so that nothing
    /// changes the priority once the work has started. Inlinable, with the machine's two events:
    /// unspecialized, a join that raised the priority looked the work's state up at run time.
    @inlinable func applyPriority<Value>(of work: Work<Key, Value>) {
        // Entered after the lock: a start in between waits for nothing, and the writer's
        // `nextPriority` then finds the work started and writes nothing.
        guard let writer = state.withLock({ $0.claimWriting(work) }) else { return }
        writer.enter()
        while true {
            let next = state.withLock { $0.nextPriority(of: work) }
            guard case .write(let priority, let runner) = next else { break }
            runner.prioritize(priority)
        }
        writer.leave()
        deliverEvents()
    }

    // MARK: Timers

    /// Withdraws the caller in `slot` with ``CoalescingError/timedOut`` once `timeout` has
    /// passed on the clock, unless the result reached it first. Holds the work only weakly
    /// meanwhile.
    @usableFromInline func armTimeout<Value>(_ work: Work<Key, Value>, slot: Int?, after timeout: Duration) {
        clock.schedule(timeout) { [weak self, weak work] in
            if let self, let work { self.withdraw(work, slot: slot, reason: .timedOut) }
        }
    }

    /// Releases the stored results that have expired once the prefetch timeout has passed on the
    /// clock: the expiry as an event, so that a result nobody takes is not kept until the next call.
    @usableFromInline func armExpiry() {
        guard let prefetchTimeout else { return }
        clock.schedule(prefetchTimeout) { [weak self] in
            guard let self else { return }
            let now = clock.now()
            state.withLock { $0.releaseExpired(at: now) }
        }
    }

    /// Reports `work`, once, if it is still in flight with callers after the stall threshold.
    @usableFromInline func watchForStall<Value>(_ work: Work<Key, Value>) {
        guard let threshold = stallThreshold else { return }
        clock.schedule(threshold) { [weak self, weak work] in
            guard let self, let work else { return }
            let stall = state.withLock { $0.stalled(work, after: threshold) }
            guard case .reported(let callers) = stall else { return }
            if observer == nil {
                Controls.warn(
                    "work \"\(work.key)\" has been in flight for \(threshold) with \(callers) caller(s) waiting; "
                        + "does it always end, by finishing or throwing?")
            }
            deliverEvents()
        }
    }

    // MARK: Events

    /// Delivers every recorded event, unless another thread is already delivering them: that
    /// thread then delivers these too, in order. An observer that calls back into the engine only
    /// adds to the batch it is being fed from, and never deadlocks.
    @inlinable func deliverEvents() {
        // Inline, so that a coalescer nobody observes pays one comparison: the delivery itself,
        // generic over the key, looks up the events' metadata before its first line.
        if observer != nil { deliverRecordedEvents() }
    }

    /// Returns once the events recorded so far are delivered: here, or by the thread already
    /// delivering them, which resumes this caller right after them.
    @usableFromInline func afterRecordedEvents() async {
        guard observer != nil else { return }
        await withUnsafeContinuation { continuation in deliverRecordedEvents { continuation.resume() } }
    }

    /// Delivers the events; `settle`, a work's end, runs right after the events recorded before
    /// it: here, or on the thread already delivering.
    @usableFromInline func deliverRecordedEvents(then settle: (@Sendable () -> Void)? = nil) {
        guard let observer else { return }
        var batch = state.withLock { $0.outbox?.startDelivering(then: settle) }
        var settle = batch == nil ? nil : settle
        while var items = batch {
            for item in items {
                switch item {
                case .event(let event): observer(event)
                case .settle(let settle): settle()
                }
            }
            settle?()
            settle = nil
            items.removeAll(keepingCapacity: true)
            batch = state.withLock { [items] in $0.outbox?.continueDelivering(reusing: items) }
        }
    }
}

// MARK: - Operations arriving

extension Engine where Key == OperationKey {
    /// An operation arrives: it joins identical work in flight, or starts new work (its own caller,
    /// watching `sink`, the first to wait), or, not fresh, is left alone or handed to the queue.
    /// Then `newcomer`, if any, waits for the work the operation started or joined, in place of
    /// the operation's own caller, with the operation's urgency unless it states its own.
    @inlinable func admit<Value>(
        _ operation: CoalescibleOperation<Value>, watching sink: ProgressSink? = nil,
        then newcomer: OperationQueueManager.Newcomer<Value>?, by taker: Taker = .manager
    ) -> Admitted<OperationKey, Value> {
        // Read before locking: the getters are overridable, and no user code runs under our lock.
        let urgency = Urgency(OperationPriority(of: operation))
        let policy = operation.abandonedWorkPolicy
        let key = OperationKey(identifier: operation.identifier, valueType: Value.self)
        let now = time()
        return state.withLock { machine in
            let plan = machine.planAdmission(key, running: operation, floor: urgency, policy: policy, at: now)
            // Taken under the lock, the one action that cannot wait for its release: the plan's slot
            // and its new work would otherwise go to another arrival first, and the operation's
            // claim must hold for the work it is admitted to (as a task is created under it).
            let taken = operation.take(plan.work, of: self, slot: plan.slot, for: taker)
            return machine.admit(operation, plan, taken: taken, asking: urgency, watching: sink, then: newcomer)
        }
    }

    /// The work's operation starts: from now on nothing changes its priority. Waits for a write in
    /// progress; returns whether the work is still in flight, so that its operation runs. Through
    /// the work's own ``AnyWork/begin``, specialized where the work was made.
    func begin(_ work: AnyWork<OperationKey>) -> Bool {
        let begun = state.withLock { work.begin(&$0, work) }
        begun.after?.wait()
        return begun.runs
    }

    // MARK: The deprecated hand-join: its machine's step, `planJoiningByHand`, is in Deprecations.swift

    /// The deprecated `coalesce(operation:)`: `operation` joins `work`, if the machine lets it.
    /// Returns whether it joined.
    func join<Value>(_ operation: CoalescibleOperation<Value>, to work: Work<OperationKey, Value>) -> Bool {
        let urgency = Urgency(OperationPriority(of: operation))
        let admission = state.withLock { machine -> Admitted<OperationKey, Value>? in
            guard let plan = machine.planJoiningByHand(work) else { return nil }
            // Taken under the lock, as at any admission.
            let taken = operation.take(work, of: self, slot: plan.slot, for: .handJoin)
            return machine.admit(operation, plan, taken: taken, asking: urgency, watching: nil, then: nil)
        }
        guard case .joins(let entry) = admission else { return false }
        follow(entry, timeout: nil)
        return true
    }

    /// Starts work for an operation that others join by hand, in an engine of its own, which
    /// nothing else reaches: its result takes the same path as any other. The operation is taken
    /// for no queue: the app enqueues it. One that is not fresh is left as it is.
    static func adopt<Value>(_ operation: CoalescibleOperation<Value>) {
        let engine = Engine(observer: nil, stallThreshold: nil, clock: EngineClock(ContinuousClock()))
        _ = engine.admit(operation, then: nil, by: .adoption)
    }
}
