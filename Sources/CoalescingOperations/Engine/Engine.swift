import Foundation

/// The one engine under both halves: the work in flight by key, each work's callers and phase,
/// forget, timeouts, abandonment, the callers' priorities, statistics, events and stall checks,
/// all under **one** lock.
///
/// ``OperationQueueManager`` and the two task coalescers are front-ends over it: they say who the
/// caller is (a handler on a queue, an absorbed operation, a waiting task) and what runs the work
/// (an operation on a queue, a detached task); everything else happens here, once.
///
/// The shape is that of a state machine behind a lock. Every change is a transition of
/// ``Registry`` and of one ``Work``, run under the lock; it counts and records what it changed
/// in the same step, and returns ``Effects``: what must happen once the lock is released. The
/// engine carries them out in one place (``carryOut(_:)``), in a fixed order, with no lock held,
/// then hands the recorded events to the observer. No user code, continuation, KVO notification
/// or observer ever runs under the lock. The operations' own locks, where one is taken with this
/// one, are always taken after it.
@usableFromInline final class Engine<Key: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: `state`'s lock guards the registry and the `var`s of every `Work` this engine
    // holds; the rest is immutable.
    @usableFromInline let state: LockedState<Registry>
    /// Receives the events, one at a time and in order; nil records none.
    @usableFromInline let observer: (@Sendable (CoalescingEvent<Key>) -> Void)?
    /// How long work may stay in flight with callers waiting before it is reported.
    let stallThreshold: Duration?
    init(
        observer: (@Sendable (CoalescingEvent<Key>) -> Void)?, stallThreshold: Duration?,
        prefetchTimeout: Duration? = nil
    ) {
        self.observer = observer
        self.stallThreshold = stallThreshold
        state = LockedState(Registry(observed: observer != nil, prefetchTimeout: prefetchTimeout))
    }

    // MARK: The registry

    /// Everything behind the lock but the works' own fields.
    @usableFromInline struct Registry {
        /// Work in flight that a new caller joins. An entry leaves in the same step as its work
        /// ends or is forgotten, and only if it still holds that work.
        @usableFromInline var index: [Key: AnyWork<Key>] = [:]
        /// Forgotten work still in flight, so that cancelling everything reaches it.
        var forgotten: [ObjectIdentifier: AnyWork<Key>] = [:]
        @usableFromInline var statistics = CoalescingStatistics()
        /// Events recorded and not yet delivered; nil when nobody observes, so none is built.
        @usableFromInline var events: [CoalescingEvent<Key>]?
        /// The emptied buffer of the last batch delivered, so that recording allocates nothing
        /// once warm (an observed join cost twice as much without it).
        var spare: [CoalescingEvent<Key>] = []
        var isDelivering = false
        /// How long a prefetched result waits for its consumer; nil where nothing is stored.
        let prefetchTimeout: Duration?
        /// The clock stored results expire by; tests move it by hand.
        var now: @Sendable () -> ContinuousClock.Instant = { .now }
        /// The earliest expiry among stored results, or later; nil when nothing is stored.
        @usableFromInline var nextExpiry: ContinuousClock.Instant?

        init(observed: Bool, prefetchTimeout: Duration?) {
            events = observed ? [] : nil
            self.prefetchTimeout = prefetchTimeout
        }

        @inlinable mutating func record(_ event: @autoclosure () -> CoalescingEvent<Key>) {
            events?.append(event())
        }

        /// The work a new caller of `key` joins, if any.
        @inlinable func inFlight<Value>(_ key: Key, as _: Value.Type) -> Work<Key, Value>? {
            // Every work under a key has the key's `Value` type: the operations' keys include it,
            // and a task coalescer has one.
            guard let work = index[key], work.isInFlight else { return nil }
            return unsafeDowncast(work, to: Work<Key, Value>.self)
        }

        /// Indexes new work, started by the caller that brings it.
        @inlinable mutating func start<Value>(_ work: Work<Key, Value>) {
            index[work.key] = work
            work.number = statistics.countStart()
            record(.workStarted(key: work.key, work: work.number))
        }

        /// Adds a caller to work in flight, in a slot of its own, asking for `urgency` if it states
        /// one (``AnyWork/demand(_:from:)``). The first caller to arrive started the work; every
        /// later one joined it.
        /// A caller that asked for progress (`watcher`) is handed the latest at once (Guarantee 25).
        @inlinable mutating func join<Value>(
            _ work: Work<Key, Value>, _ caller: Caller<Value>, asking urgency: Urgency?,
            watching watcher: Watcher? = nil
        ) -> (slot: Int, raised: Bool) {
            let slot = work.callers.add(caller)
            let raised = urgency.map { work.demand($0, from: slot) } ?? false
            if let watcher { work.watch(watcher, in: slot) }
            if case .task(nil, _) = caller { work.unparked += 1 }
            if caller.waits {
                work.live += 1
                statistics.countArrival(joining: work.arrivals > 0)
                if work.arrivals > 0 { record(.callerJoined(key: work.key, work: work.number, callers: work.live)) }
                work.arrivals += 1
            }
            return (slot, raised)
        }

        /// Withdraws the caller in `slot` for `reason`; nil stands for the one that started the
        /// work without a caller of its own, which abandons it only if nobody else waits. When the
        /// last caller leaves, the work follows its ``AbandonedWorkPolicy``.
        @usableFromInline
        mutating func withdraw<Value>(_ work: Work<Key, Value>, slot: Int?, reason: WithdrawalReason) -> Effects<Value>
        {
            guard work.isInFlight else { return Effects() }
            var caller: Caller<Value>?
            if let slot {
                caller = work.callers.remove(slot, reason: reason)
                guard let caller else { return Effects() }
                if caller.waits {
                    work.live -= 1
                    statistics.countDeparture(reason)
                    record(.callerWithdrawn(key: work.key, work: work.number, reason: reason))
                }
            }
            let abandoned = work.live == 0 && work.policy == .cancel && caller?.waits != false
            var effects = abandoned ? end(work, with: .failure(CoalescingError.cancelled), stopping: true) : Effects()
            if let slot, let caller, !work.watchers.isEmpty, let watcher = work.watchers.removeValue(forKey: slot) {
                // Its error comes after any progress being delivered, and no progress after it.
                watcher.latest = nil
                if watcher.hand(last: { caller.tell(.failure(reason.error)) }) {
                    effects.delivering.append(watcher)
                }
            } else {
                effects.withdrawn = caller.map { ($0, reason) }
            }
            if let slot, work.release(slot) { effects.reprioritize = work }
            return effects
        }

        /// Decides the work's result: takes it out of the index, counts and records its end, and
        /// returns what serves its callers. Nothing if the result was already decided.
        @usableFromInline mutating func end<Value>(
            _ work: Work<Key, Value>, with result: Result<Value, Error>, stopping: Bool
        ) -> Effects<Value> {
            guard let runner = work.phase.runner else { return Effects() }
            let served = work.live
            var callers = work.callers
            // Callers that reserved a slot and have not parked yet read the result when they do.
            if work.unparked == 0 { work.callers = Callers() }
            work.phase = .ended(work.unparked > 0 ? result : nil)
            work.isInFlight = false
            // A prefetch that no consumer waits for keeps its value, indexed, for the next one.
            if work.isPrefetch, work.isIndexed, case .success(let value) = result, !callers.hasConsumer,
                let timeout = prefetchTimeout
            {
                let expiry = now().advanced(by: timeout)
                work.stored = (value, expiry)
                nextExpiry = min(nextExpiry ?? expiry, expiry)
            } else {
                unindex(work)
            }
            let delivering = work.watchers.isEmpty ? [] : work.serveWatching(from: &callers, with: result)
            let outcome = WorkOutcome(result)
            statistics.countEnd(outcome, served: served)
            let error: (any Error)? = if case .failure(let error) = result, outcome == .failed { error } else { nil }
            record(
                .workEnded(
                    key: work.key, work: work.number, outcome: outcome, error: error, callersServed: served,
                    duration: work.startedAt.map { .now - $0 } ?? .zero))
            var effects = Effects<Value>()
            effects.stop = stopping ? runner : nil
            effects.ended = runner
            effects.served = (callers, result)
            effects.delivering = delivering
            return effects
        }

        @usableFromInline mutating func unindex(_ work: AnyWork<Key>) {
            if work.isIndexed {
                if index[work.key] === work {
                    index[work.key] = nil
                }
                work.isIndexed = false
            } else {
                forgotten[ObjectIdentifier(work)] = nil
            }
        }

        /// Drops `key` from the index, leaving its work to end in its own time.
        mutating func forget(_ key: Key) -> Bool {
            let work = index.removeValue(forKey: key)
            guard let work else { return false }
            work.isIndexed = false
            if work.isInFlight {
                forgotten[ObjectIdentifier(work)] = work
            }
            return true
        }

        // MARK: Prefetched results

        /// The value stored for `key`, taken by a consumer: counted as a caller who joined the
        /// prefetch's work and was served. Nil if none is stored.
        @usableFromInline mutating func takeStored<Value: Sendable>(_ key: Key, as _: Value.Type) -> Value? {
            releaseExpired()
            guard let entry = index[key], entry.storedUntil != nil else { return nil }
            let work = unsafeDowncast(entry, to: Work<Key, Value>.self)
            guard let (value, _) = work.stored else { return nil }
            index[key] = nil
            work.stored = nil
            work.isIndexed = false
            statistics.countArrival(joining: true)
            statistics.callersServed += 1
            return value
        }

        /// Whether a prefetched result waits for `key`.
        @usableFromInline mutating func hasStored(_ key: Key) -> Bool {
            releaseExpired()
            return index[key]?.storedUntil != nil
        }

        /// Drops expired results; sweeps only once the earliest expiry has passed.
        @usableFromInline mutating func releaseExpired() {
            guard let nextExpiry else { return }
            let now = now()
            guard now >= nextExpiry else { return }
            var earliest: ContinuousClock.Instant?
            for (key, work) in index {
                guard let expiry = work.storedUntil else { continue }
                if expiry <= now {
                    index[key] = nil
                    work.isIndexed = false
                } else {
                    earliest = min(earliest ?? expiry, expiry)
                }
            }
            self.nextExpiry = earliest
        }
    }

    // MARK: Arriving

    /// Where a caller arrived, decided under the lock: the work it started or joined and its slot
    /// there, for ``follow(_:timeout:)`` to carry out.
    @usableFromInline struct Entry<Value: Sendable> {
        @usableFromInline let work: Work<Key, Value>
        /// Nil for work started with no caller of its own.
        @usableFromInline let slot: Int?
        /// Whether the caller started the work: it is then watched for stalls.
        @usableFromInline let started: Bool
        /// Whether the caller raised the work's priority: it is then written.
        @usableFromInline let raised: Bool

        @inlinable init(_ work: Work<Key, Value>, slot: Int? = nil, started: Bool = false, raised: Bool = false) {
            (self.work, self.slot, self.started, self.raised) = (work, slot, started, raised)
        }
    }

    /// What follows every arrival, whichever way in it took, once the lock is released: new work
    /// is watched for stalls, the caller's timeout armed, the work's priority raised, the events
    /// delivered, and a caller that asked for progress (`watcher`) is handed the latest value.
    /// Only a caller that asked for a deadline, or for progress, pays for it.
    @inlinable func follow<Value>(_ entry: Entry<Value>?, timeout: Duration?, watcher: Watcher? = nil) {
        if let entry {
            if entry.started {
                watchForStall(entry.work)
            }
            if let timeout {
                withdraw(entry.work, slot: entry.slot, after: timeout)
            }
            if entry.raised {
                applyPriority(of: entry.work)
            }
            if let watcher {
                deliverLatest(to: watcher)
            }
        }
        deliverEvents()
    }

    // MARK: Transitions, carried out

    /// Runs `transition` under the lock, then carries out what it returns and delivers the events.
    @inlinable func change<Value>(_ transition: (inout Registry) -> Effects<Value>) {
        carryOut(state.withLock(transition))
    }

    /// Withdraws the caller in `slot` of `work`.
    @usableFromInline func withdraw<Value>(_ work: Work<Key, Value>, slot: Int?, reason: WithdrawalReason) {
        change { $0.withdraw(work, slot: slot, reason: reason) }
    }

    /// Decides `work`'s result and serves its callers; nothing if it was already decided.
    @inlinable func settle<Value>(_ work: Work<Key, Value>, with result: Result<Value, Error>) {
        change { $0.end(work, with: result, stopping: false) }
    }

    /// Cancels `work` for all its callers.
    @usableFromInline func cancel<Value>(_ work: Work<Key, Value>) {
        change { $0.end(work, with: .failure(CoalescingError.cancelled), stopping: true) }
    }

    /// Cancels the work in flight under every key that `matches`, forgotten work included when
    /// `includingForgotten`, and drops stored results; returns whether there was any.
    func cancelAll(where matches: (Key) -> Bool, includingForgotten: Bool) -> Bool {
        let (found, works) = state.withLock { registry -> (Bool, [AnyWork<Key>]) in
            var works: [AnyWork<Key>] = []
            var dropped = false
            for (key, work) in registry.index where matches(key) {
                if work.isInFlight {
                    works.append(work)
                } else {
                    // A stored prefetched value: dropped.
                    registry.index[key] = nil
                    work.isIndexed = false
                    dropped = true
                }
            }
            if includingForgotten {
                works += registry.forgotten.values
            }
            return (!works.isEmpty || dropped, works)
        }
        for work in works {
            work.cancel(in: self)
        }
        deliverEvents()
        return found
    }

    /// Forgets the work in flight under every key that `matches`; returns whether there was any.
    func forget(where matches: (Key) -> Bool) -> Bool {
        state.withLock { registry in
            registry.index.keys.filter(matches).reduce(false) { registry.forget($1) || $0 }
        }
    }

    /// Carries out `effects` in the order that keeps every promise: running work sees it was
    /// cancelled before anyone hears so; absorbed operations finish before the operation that ran
    /// the work, and that one before any handler runs; the observer hears of the end before the
    /// callers are handed the result; the priority follows.
    @inlinable func carryOut<Value>(_ effects: Effects<Value>) {
        effects.stop?.stop()
        if let (caller, reason) = effects.withdrawn {
            caller.tell(.failure(reason.error))
        }
        var delivery = Delivery<Value>()
        if let (callers, result) = effects.served {
            delivery.add(callers, result: result)
        }
        effects.ended?.ended()
        deliverEvents()
        if let (_, result) = effects.served {
            delivery.deliver(result)
        }
        effects.delivering.forEach(deliver)
        if let work = effects.reprioritize {
            applyPriority(of: work)
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
                    reprioritize(work, slot: slot, to: Urgency(Task.currentPriority))
                }
                return try await park(in: work, slot: slot)
            } onPriorityEscalated: { [self] _, raised in
                reprioritize(work, slot: slot, to: Urgency(raised))
            }
        }
        #endif
        return try await park(in: work, slot: slot)
    }

    @inlinable func park<Value>(in work: Work<Key, Value>, slot: Int) async throws -> Value {
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Value, Error>) in
                if let result = state.withLock({ _ in work.park(continuation, in: slot) }) {
                    continuation.resume(with: result)
                }
            }
        } onCancel: {
            withdraw(work, slot: slot, reason: .withdrawn)
        }
    }

    // MARK: Priority

    /// Changes the priority the caller in `slot` asks for.
    @usableFromInline func reprioritize<Value>(_ work: Work<Key, Value>, slot: Int?, to priority: Urgency?) {
        let mustApply = state.withLock { _ in work.isInFlight && work.reprioritize(slot, to: priority) }
        if mustApply {
            applyPriority(of: work)
        }
    }

    /// Sets the floor under the callers' priorities: what the app set on the operation itself.
    func setFloor(of work: AnyWork<Key>, _ change: (inout OperationPriority) -> Void) {
        let mustApply = state.withLock { _ in work.setFloor(change) }
        if mustApply {
            applyPriority(of: work)
        }
    }

    /// Writes the work's priority to whatever runs it until it matches what its callers ask.
    ///
    /// One thread writes at a time; the others only change the target, which the writer picks
    /// up before it lets go. An operation's start waits for a write in progress, so that nothing
    /// changes the priority once the work has started.
    @usableFromInline func applyPriority(of work: AnyWork<Key>) {
        let writer = DispatchGroup()
        guard state.withLock({ _ in work.claimWriting(writer) }) else { return }
        writer.enter()
        while let priority = state.withLock({ registry -> Urgency? in
            guard let next = work.nextPriority() else { return nil }
            registry.record(
                .priorityChanged(key: work.key, work: work.number, priority: next.event(rising: work.risesOnly)))
            return next
        }) {
            work.write(priority)
        }
        writer.leave()
        deliverEvents()
    }

    /// Marks the work's operation as started: from now on nothing changes its priority. Waits for
    /// a write in progress; returns whether the work is still in flight, so that its operation
    /// runs.
    func begin(_ work: AnyWork<Key>) -> Bool {
        let (inFlight, writer) = state.withLock { _ in work.begin() }
        writer?.wait()
        return inFlight
    }

    // MARK: Timers

    /// Withdraws the caller in `slot` with ``CoalescingError/timedOut`` once `timeout` has
    /// passed, unless the result reached it first. Holds the work only weakly meanwhile.
    @usableFromInline func withdraw<Value>(_ work: Work<Key, Value>, slot: Int?, after timeout: Duration) {
        Controls.schedule(after: timeout) { [weak self, weak work] in
            if let self, let work {
                self.withdraw(work, slot: slot, reason: .timedOut)
            }
        }
    }

    /// Reports `work`, once, if it is still in flight with callers after the stall threshold.
    @usableFromInline func watchForStall(_ work: AnyWork<Key>) {
        guard let threshold = stallThreshold else { return }
        Controls.schedule(after: threshold) { [weak self, weak work] in
            guard let self, let work else { return }
            let callers = state.withLock { registry -> Int in
                guard work.isInFlight, work.live > 0 else { return 0 }
                registry.record(.workStalled(key: work.key, work: work.number, callers: work.live, elapsed: threshold))
                return work.live
            }
            guard callers > 0 else { return }
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
        if observer != nil {
            deliverRecordedEvents()
        }
    }

    @usableFromInline func deliverRecordedEvents() {
        guard let observer else { return }
        var batch = state.withLock { registry -> [CoalescingEvent<Key>] in
            guard !registry.isDelivering, registry.events?.isEmpty == false else { return [] }
            registry.isDelivering = true
            return registry.takeEvents()
        }
        while !batch.isEmpty {
            for event in batch {
                observer(event)
            }
            batch.removeAll(keepingCapacity: true)
            batch = state.withLock { [batch] registry in
                registry.spare = batch
                guard registry.events?.isEmpty == false else {
                    registry.isDelivering = false
                    return []
                }
                return registry.takeEvents()
            }
        }
    }

    // MARK: Reading

    var statistics: CoalescingStatistics {
        state.withLock { $0.statistics }
    }
}

extension Engine.Registry {
    /// Takes the recorded events, leaving the spare buffer in their place.
    mutating func takeEvents() -> [CoalescingEvent<Key>] {
        var taken = spare
        spare = []
        swap(&taken, &events!)
        return taken
    }
}

// MARK: - Effects

/// What a transition decided must happen once the lock is released; ``Engine/carryOut(_:)`` does
/// it, always in the same order.
extension Engine {
    @usableFromInline struct Effects<Value: Sendable> {
        /// Cancelled or abandoned work to stop, before anyone hears of it.
        @usableFromInline var stop: Runner<Value>?
        /// A caller that left, and why: it hears its error.
        @usableFromInline var withdrawn: (Caller<Value>, WithdrawalReason)?
        /// The callers to serve with the decided result.
        @usableFromInline var served: (Callers<Value>, Result<Value, Error>)?
        /// The runner whose work ended: an operation's lifecycle finishes after its absorbed
        /// operations' and before any handler runs.
        @usableFromInline var ended: Runner<Value>?
        /// Work whose callers' priorities changed.
        @usableFromInline var reprioritize: AnyWork<Key>?
        /// Callers that asked for progress, with their last call to deliver after it.
        @usableFromInline var delivering: [Watcher] = []

        @inlinable init() {}
    }
}

// MARK: - One piece of work

/// What the registry needs of a work whatever its `Value`: its key, its callers' count and
/// priorities, and whether it is still in flight.
///
/// Every `var` here and in ``Work`` is read and written only under the lock of the engine that
/// holds the work.
@usableFromInline class AnyWork<Key: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: every `var` is guarded by the lock of the `Engine` that created the work. The same
    // lock makes every access exclusive, so the runtime's exclusivity checks are switched off for
    // them (`@exclusivity(unchecked)`): measured, they cost a join ~290 instructions.
    @usableFromInline let key: Key
    /// The work's number in its coalescer's events, given when it starts.
    @usableFromInline @exclusivity(unchecked) var number = 0
    /// Callers waiting now.
    @usableFromInline @exclusivity(unchecked) var live = 0
    /// Callers that ever arrived: the first started the work, the others joined it.
    @usableFromInline @exclusivity(unchecked) var arrivals = 0
    /// Callers that reserved a slot and have not parked their continuation yet.
    @usableFromInline @exclusivity(unchecked) var unparked = 0
    /// Whether its result is still open.
    @usableFromInline @exclusivity(unchecked) var isInFlight = true
    /// Whether new callers find the work under its key (or its stored value).
    @usableFromInline @exclusivity(unchecked) var isIndexed = true
    /// Whether a prefetch ever joined: the value is then stored if no consumer waits for it.
    @usableFromInline @exclusivity(unchecked) var isPrefetch = false
    /// What happens when the last caller withdraws.
    @usableFromInline let policy: AbandonedWorkPolicy
    /// When the work started; only read where an observer wants durations.
    let startedAt: ContinuousClock.Instant?

    // The priority: the most urgent waiting caller's, over the floor the app set on the operation.
    @usableFromInline @exclusivity(unchecked) var priorities: ContiguousArray<Urgency?> = []
    @usableFromInline @exclusivity(unchecked) var floor: Urgency
    /// What was last written to whatever runs the work.
    @usableFromInline @exclusivity(unchecked) var applied: Urgency
    /// The thread writing the priority, if one is; the operation's start waits for it.
    @exclusivity(unchecked) var writer: DispatchGroup?
    /// Set when the operation starts: its priority no longer moves.
    @usableFromInline @exclusivity(unchecked) var isPriorityFrozen = false

    /// A task's priority: it only ever rises, so nothing is kept per caller.
    @usableFromInline let risesOnly: Bool

    /// The latest progress the work reported, for callers who join later.
    @usableFromInline @exclusivity(unchecked) var progress: WorkProgress?
    /// The callers that asked for progress, by slot: empty, and free, when none did.
    @usableFromInline @exclusivity(unchecked) var watchers: [Int: Watcher] = [:]

    @usableFromInline init(key: Key, policy: AbandonedWorkPolicy, floor: Urgency, risesOnly: Bool, timed: Bool) {
        self.key = key
        self.policy = policy
        self.risesOnly = risesOnly
        self.floor = floor
        applied = floor
        startedAt = timed ? .now : nil
    }

    /// When a stored value expires, if one is stored.
    var storedUntil: ContinuousClock.Instant? { preconditionFailure("AnyWork is abstract") }
    func cancel(in engine: Engine<Key>) { preconditionFailure("AnyWork is abstract") }
    func write(_ priority: Urgency) { preconditionFailure("AnyWork is abstract") }

    // MARK: Priority, under the engine's lock

    /// The priority the work should have: the most urgent waiting caller's, over the floor.
    /// Recomputed from the callers each time, rather than tracked.
    var target: Urgency {
        priorities.reduce(floor) { current, next in next.map(current.raised) ?? current }
    }

    /// Records the priority the caller in `slot` asks for; returns whether it raises the work.
    /// A task's priority only ever rises, so a more urgent task caller raises the work's own and
    /// nothing is kept per caller.
    @usableFromInline func demand(_ urgency: Urgency, from slot: Int) -> Bool {
        if risesOnly {
            floor = floor.raised(to: urgency)
        } else {
            while priorities.count <= slot {
                priorities.append(nil)
            }
            priorities[slot] = urgency
        }
        return !isPriorityFrozen && applied.raised(to: urgency) != applied
    }

    /// Forgets the priority of the caller in `slot`; returns whether the work must follow: only a
    /// caller holding up one of the work's knobs lowers it by leaving.
    func release(_ slot: Int) -> Bool {
        guard priorities.indices.contains(slot), let released = priorities[slot] else { return false }
        priorities[slot] = nil
        return !isPriorityFrozen && released.holdsUp(applied)
    }

    func reprioritize(_ slot: Int?, to urgency: Urgency?) -> Bool {
        guard let slot else { return false }
        let released = release(slot)
        return (urgency.map { demand($0, from: slot) } ?? false) || released
    }

    func setFloor(_ change: (inout OperationPriority) -> Void) -> Bool {
        var own = floor.operationPriority
        change(&own)
        floor = Urgency(own)
        return !isPriorityFrozen
    }

    /// Takes the right to write the priority, unless another thread holds it or nothing changed.
    func claimWriting(_ group: DispatchGroup) -> Bool {
        guard writer == nil, !isPriorityFrozen, isInFlight else { return false }
        writer = group
        return true
    }

    /// The next priority to write, or nil, letting go of the right, when the runner has it.
    func nextPriority() -> Urgency? {
        let target = target
        guard !isPriorityFrozen, isInFlight, target != applied else {
            writer = nil
            return nil
        }
        applied = target
        return target
    }

    func begin() -> (inFlight: Bool, writer: DispatchGroup?) {
        isPriorityFrozen = true
        return (isInFlight, writer)
    }
}

/// One run of the work for one key, and the callers waiting for it.
@usableFromInline final class Work<Key: Hashable & Sendable, Value: Sendable>: AnyWork<Key>, @unchecked Sendable {
    // @unchecked: like `AnyWork`, every `var` is guarded by the engine's lock.
    @usableFromInline @exclusivity(unchecked) var callers = Callers<Value>()
    @usableFromInline @exclusivity(unchecked) var phase: Phase<Value>
    /// A prefetched value no consumer took, and until when it waits for one.
    @usableFromInline @exclusivity(unchecked) var stored: (value: Value, until: ContinuousClock.Instant)?

    @usableFromInline
    init(key: Key, runner: Runner<Value>, policy: AbandonedWorkPolicy, floor: Urgency, timed: Bool) {
        phase = .inFlight(runner)
        let risesOnly = if case .task = runner { true } else { false }
        super.init(key: key, policy: policy, floor: floor, risesOnly: risesOnly, timed: timed)
    }

    override var storedUntil: ContinuousClock.Instant? { stored?.until }

    override func cancel(in engine: Engine<Key>) {
        engine.cancel(self)
    }

    override func write(_ priority: Urgency) {
        phase.runner?.prioritize(priority)
    }

    /// Attaches the runner once it exists: a task is created after its work.
    @usableFromInline func attach(_ runner: Runner<Value>) {
        phase = .inFlight(runner)
    }

    /// Parks `continuation` in `slot`; returns the result to resume it with at once, if known.
    @inlinable func park(_ continuation: UnsafeContinuation<Value, Error>, in slot: Int) -> Result<Value, Error>? {
        unparked -= 1
        switch (callers.entries[slot], phase) {
        case (.task(nil, let consumes), .inFlight):
            callers.entries[slot] = .task(continuation, consumes: consumes)
            return nil
        case (.left(let reason), _):
            return .failure(reason.error)
        case (.task(nil, _), .ended(let result?)):
            // Progress still being delivered to this caller goes first (Guarantee 24).
            if let watcher = watchers[slot], watcher.isDelivering {
                watcher.last = { continuation.resume(with: result) }
                return nil
            }
            return result
        default:
            preconditionFailure("Work: slot \(slot) parked twice, or after its result was dropped")
        }
    }
}

/// Where a work stands.
@usableFromInline enum Phase<Value: Sendable> {
    /// In flight, run by `runner`.
    case inFlight(Runner<Value>)
    /// Decided. The result is kept only for callers that have yet to park.
    case ended(Result<Value, Error>?)

    @usableFromInline var runner: Runner<Value>? {
        if case .inFlight(let runner) = self { runner } else { nil }
    }
}

/// What runs the work: an operation on a queue, or a task.
@usableFromInline enum Runner<Value: Sendable> {
    case operation(ConcurrentOperation<Value>)
    /// A task; nil for the moment between creating the work and starting its task.
    case task(Task<Void, Never>?)

    /// Stops the work: cancels the operation (through its `cancel()`, which a subclass may
    /// override to stop what it started) or the task.
    @usableFromInline func stop() {
        switch self {
        case .operation(let operation): operation.cancel()
        case .task(let task): task?.cancel()
        }
    }

    /// The work's result was handed out: an operation's lifecycle moves on.
    @usableFromInline func ended() {
        if case .operation(let operation) = self {
            operation.workEnded()
        }
    }

    func prioritize(_ urgency: Urgency) {
        switch self {
        case .operation(let operation): operation.write(urgency.operationPriority)
        case .task(let task?): Controls.escalate(task, to: urgency.taskPriority)
        case .task(nil): break
        }
    }
}

// MARK: - Callers

/// One caller waiting for a work's result.
@usableFromInline enum Caller<Value: Sendable> {
    /// A completion handler, called on `queue`, or on the thread that serves it when nil.
    case handler(@Sendable (Result<Value, Error>) -> Void, queue: OperationQueue?)
    /// An operation absorbed into the work: it never runs, finishes when served, and hands the
    /// result to its own handler. Without one (`waits` false) it waits for nobody: it is finished
    /// with the work, but counts as no caller.
    case operation(ConcurrentOperation<Value>, waits: Bool)
    /// A waiting task: nil until it parks its continuation. `consumes` marks a consumer of a
    /// prefetchable coalescer, which takes the value instead of leaving it stored.
    case task(UnsafeContinuation<Value, Error>?, consumes: Bool)
    /// A caller that left before the result; kept so that the other slots stay valid.
    case left(WithdrawalReason)

    /// Whether a party waits for the result: everyone but an absorbed operation without a
    /// handler, and a caller that left.
    @usableFromInline var waits: Bool {
        switch self {
        case .handler, .task: true
        case .operation(_, let waits): waits
        case .left: false
        }
    }

    /// Hands one caller its result, outside any delivery batch.
    @usableFromInline func tell(_ result: Result<Value, Error>) {
        var delivery = Delivery<Value>()
        var callers = Callers<Value>()
        _ = callers.add(self)
        delivery.add(callers, result: result)
        delivery.deliver(result)
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

    /// Takes the caller in `slot` out, leaving why it left; nil if it had already left.
    @usableFromInline mutating func remove(_ slot: Int, reason: WithdrawalReason) -> Caller<Value>? {
        guard entries.indices.contains(slot) else { return nil }
        let caller = entries[slot]
        if case .left = caller { return nil }
        entries[slot] = .left(reason)
        return caller
    }

    /// Whether a consumer of a prefetch still waits: the value is then its, not stored.
    var hasConsumer: Bool {
        entries.contains { if case .task(_, consumes: true) = $0 { true } else { false } }
    }
}

/// Hands a decided result to callers: one hop per distinct callback queue, then the handlers
/// without one and the waiting tasks, on this thread.
///
/// A million callers on one queue cost one queue hop and a loop, not a million hops or a million
/// nested closures, and the loop runs on the callers' queue, so the stack never grows with them.
/// Absorbed operations finish as they are collected: before the operation that ran the work, and
/// before any handler runs.
@usableFromInline struct Delivery<Value: Sendable> {
    @usableFromInline typealias Handlers = ContiguousArray<Caller<Value>>

    @usableFromInline var inline: Handlers = []
    @usableFromInline var groups: ContiguousArray<(queue: OperationQueue, handlers: Handlers)> = []
    @usableFromInline var continuations: [UnsafeContinuation<Value, Error>] = []
    /// Where each queue's group is; consulted only for callers on more than one queue.
    @usableFromInline var groupIndex: [ObjectIdentifier: Int] = [:]

    @inlinable init() {}

    @inlinable mutating func add(_ callers: Callers<Value>, result: Result<Value, Error>) {
        if case .one(let queue) = callers.queues {
            // The common case: every caller is a handler on one queue; the list moves whole.
            if let queue {
                groups.append((queue, callers.entries))
            } else {
                inline = callers.entries
            }
            return
        }
        for caller in callers.entries {
            add(caller, result: result)
        }
    }

    @inlinable mutating func add(_ caller: Caller<Value>, result: Result<Value, Error>) {
        switch caller {
        case .handler(_, queue: nil):
            inline.append(caller)
        case .handler(_, queue: let queue?):
            groups[group(for: queue)].handlers.append(caller)
        case .operation(let operation, _):
            if let own = operation.finishRide() {
                add(own, result: result)
            }
        case .task(let continuation?, _):
            continuations.append(continuation)
        case .task(nil, _), .left:
            // Not parked yet: it reads the result when it parks. Left: it heard already.
            break
        }
    }

    /// Hands `result` to every caller collected.
    @inlinable consuming func deliver(_ result: Result<Value, Error>) {
        for (queue, handlers) in groups {
            queue.addOperation(DeliveryOperation { Self.serve(handlers, with: result) })
        }
        Self.serve(inline, with: result)
        for continuation in continuations {
            continuation.resume(with: result)
        }
    }

    @inlinable static func serve(_ handlers: Handlers, with result: Result<Value, Error>) {
        for case .handler(let handler, _) in handlers {
            handler(result)
        }
    }

    @inlinable mutating func group(for queue: OperationQueue) -> Int {
        let id = ObjectIdentifier(queue)
        if let index = groupIndex[id] {
            return index
        }
        groups.append((queue, []))
        groupIndex[id] = groups.count - 1
        return groups.count - 1
    }
}

/// Serves a group of handlers on the queue it is added to.
///
/// Not generic: the closure is built where the result's type is known, so the loop inside it is
/// specialized rather than run through generic metadata.
@usableFromInline final class DeliveryOperation: Operation, @unchecked Sendable {
    // @unchecked: `serve` is immutable and the queue hands the operation to one thread.
    private let serve: () -> Void

    @usableFromInline init(serve: @escaping () -> Void) {
        self.serve = serve
    }

    @usableFromInline override func main() {
        serve()
    }

    /// Does nothing: a delivery carries results its callers are owed.
    ///
    /// Foundation's `start()` skips `main()` on a cancelled operation, so a delivery that could be
    /// cancelled would lose its callers' callbacks whenever something cancels the operations on
    /// their queue: ``OperationQueueManager/cancelAll()`` when the callback queue is the manager's
    /// own, `cancelAllOperations()` on a busy callback queue, or an app clearing its own queue.
    @usableFromInline override func cancel() {}
}

extension WithdrawalReason {
    /// What a caller that left for this reason hears, whichever half it came through: a caller that
    /// withdrew itself hears `CancellationError`, one whose timeout passed ``CoalescingError/timedOut``.
    @usableFromInline var error: any Error {
        switch self {
        case .withdrawn: CancellationError()
        case .timedOut: CoalescingError.timedOut
        }
    }
}
