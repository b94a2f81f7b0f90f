/// The engine both task coalescers share: the work in flight by key, what each caller waits on,
/// and (for ``PrefetchableTaskCoalescer``) the prefetched results, all behind one lock.
///
/// One lock rather than an actor: a caller registers and parks with two short critical sections on
/// its own thread, without queueing behind the other callers on an actor, and the controls
/// (`cancel`, `forget`, `statistics`) are synchronous. Every
/// change runs under the lock as a transition of ``State`` that returns what to do next (resume
/// continuations, cancel or escalate a task); the caller does it after releasing the lock, so no
/// user code, continuation or observer ever runs while the lock is held.
@usableFromInline
final class TaskCoalescingCore<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    @usableFromInline typealias Work = InFlightWork<Key, Value>
    @usableFromInline typealias Operation = @Sendable () async throws -> Value

    /// How a caller arrived.
    @usableFromInline
    enum Arrival {
        /// The caller started or joined `work` and has a slot in it.
        case waiting(Work, slot: Int)
        /// A consumer took the prefetched value; nothing to wait for.
        case taken(Value)
        /// A prefetcher found a result already stored; nothing to do.
        case alreadyStored
    }

    @usableFromInline let state: LockedState<State>
    @usableFromInline let events: EventChannel<Key>?

    /// Whether an observer wants events.
    @inlinable
    var isObserved: Bool { events != nil }

    /// - Parameters:
    ///   - prefetchTimeout: How long a prefetched result is kept; nil for a coalescer that never
    ///     stores one.
    ///   - now: The clock prefetched results expire by.
    ///   - observer: Receives every event, with no lock held; nil records none.
    init(
        prefetchTimeout: Duration? = nil,
        now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now },
        observer: (@Sendable (CoalescingEvent<Key>) -> Void)?
    ) {
        let events = observer.map(EventChannel.init)
        self.events = events
        state = LockedState(State(events: events, prefetchTimeout: prefetchTimeout ?? .zero, now: now))
    }

    // MARK: Callers

    /// Registers a caller of `key`: starts `operation` if no work is in flight for it, joins the
    /// work otherwise. Never suspends, so concurrent callers always find each other.
    ///
    /// Inlinable, like the rest of the join path, so that it is specialized for the caller's `Key`
    /// and `Value`: unspecialized, every join looked up generic metadata at run time.
    @inlinable
    func arrive(
        key: Key,
        as role: CallerRole,
        priority: TaskPriority?,
        name: String?,
        timeout: Duration?,
        whenAbandoned: AbandonedWorkPolicy,
        operation: @escaping Operation
    ) -> Arrival {
        let callerPriority = Task.currentPriority
        var escalation: Task<Void, Never>?
        let arrival = state.withLock { state in
            state.arrive(
                key: key, as: role, callerPriority: callerPriority, startPriority: priority ?? callerPriority,
                whenAbandoned: whenAbandoned, escalating: &escalation
            ) { work, startPriority in
                Self.startTask(name: name, priority: startPriority) { [self] in
                    let result: Result<Value, Error>
                    do {
                        result = .success(try await operation())
                    } catch {
                        result = .failure(error)
                    }
                    settle(work, with: result)
                }
            }
        }
        if let escalation {
            Self.escalate(escalation, to: callerPriority)
        }
        if isObserved {
            drainEvents()
        }
        // Only a caller that asked for a deadline pays for one.
        if let timeout, case .waiting(let work, let slot) = arrival {
            withdraw(work, slot: slot, after: timeout)
        }
        return arrival
    }

    /// Withdraws the caller in `slot` with ``CoalescingError/timedOut`` once `timeout` has passed.
    @usableFromInline
    func withdraw(_ work: Work, slot: Int, after timeout: Duration) {
        schedule(after: timeout) { [weak self] in
            self?.withdraw(work, slot: slot, reason: .timedOut)
        }
    }

    @usableFromInline
    func drainEvents() {
        events?.drain()
    }

    /// Waits in `slot` for the work's outcome. Throws `CancellationError` as soon as the waiting
    /// task is cancelled, or `CoalescingError.timedOut` once its timeout passed: the caller
    /// withdraws, and the work goes on for the others.
    @inlinable
    func wait(for work: Work, in slot: Int) async throws -> Value {
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: Work.Continuation) in
                if let outcome = state.withLock({ _ in work.park(continuation, in: slot) }) {
                    continuation.resume(with: outcome)
                }
            }
        } onCancel: {
            withdraw(work, slot: slot, reason: .withdrawn)
        }
    }

    /// Withdraws the caller in `slot`, unless the work's outcome was already decided (then the
    /// caller gets it) or the caller already withdrew.
    @inlinable
    func withdraw(_ work: Work, slot: Int, reason: WithdrawalReason) {
        let withdrawal = state.withLock { $0.withdraw(work, slot: slot, reason: reason) }
        if let withdrawal {
            withdrawal.abandonedTask?.cancel()
            withdrawal.continuation?.resume(throwing: reason.error)
        }
        if isObserved {
            drainEvents()
        }
    }

    /// Called by the work's own task when the work returns or throws.
    @usableFromInline
    func settle(_ work: Work, with result: Result<Value, Error>) {
        let continuations = state.withLock { $0.settle(work, with: result) }
        for continuation in continuations {
            continuation.resume(with: result)
        }
        events?.drain()
    }

    // MARK: Controls

    /// Cancels the work in flight for `key` and drops the result stored for it; returns whether
    /// there was either.
    func cancel(key: Key) -> Bool {
        let (found, ended) = state.withLock { $0.cancel(key: key) }
        ended.carryOut()
        events?.drain()
        return found
    }

    /// Cancels all work in flight, forgotten or not, and drops every stored result; returns
    /// whether there was any.
    func cancelAll() -> Bool {
        let (found, ended) = state.withLock { $0.cancelAll() }
        ended.carryOut()
        events?.drain()
        return found
    }

    /// Drops the work for `key` from the index, and the result stored for it; returns whether
    /// there was either.
    func forget(key: Key) -> Bool {
        state.withLock { $0.forget(key: key) }
    }

    // MARK: Reading

    var statistics: CoalescingStatistics {
        state.withLock { $0.statistics }
    }

    /// How many callers wait for the work indexed under `key`.
    func callerCount(for key: Key) -> Int {
        state.withLock { $0.index[key]?.callerCount ?? 0 }
    }

    /// How many results are stored, expired or not.
    var storedCount: Int {
        state.withLock { $0.stored.count }
    }

    // MARK: Tasks

    /// Starts the work in a task of its own. Detached, so that it inherits none of the starting
    /// caller's task-local values (a request ID, a trace span, credentials): its context is
    /// nobody's in particular. It keeps the starting priority, raised as callers join.
    @usableFromInline
    static func startTask(
        name: String?, priority: TaskPriority, operation: sending @escaping () async -> Void
    ) -> Task<Void, Never> {
        #if compiler(>=6.2)
        Task.detached(name: name, priority: priority, operation: operation)
        #else
        Task.detached(priority: priority, operation: operation)
        #endif
    }

    /// Raises `task`'s priority, on runtimes that can (Swift 6.2 and later). Tasks can only be
    /// escalated, never lowered.
    @usableFromInline
    static func escalate(_ task: Task<Void, Never>, to priority: TaskPriority) {
        #if compiler(>=6.2)
        if #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) {
            task.escalatePriority(to: priority)
        }
        #endif
    }
}

/// What a caller is to a task coalescer, which decides how it treats prefetched results.
///
/// Outside the generic engine (as are the other small enums), so that the unspecialized join path
/// finds their metadata statically instead of instantiating it on every call.
@usableFromInline
enum CallerRole {
    /// ``InFlightTaskCoalescer``: nothing is ever stored.
    case plain
    /// ``PrefetchableTaskCoalescer/deduplicated(key:priority:name:timeout:whenAbandoned:operation:)``:
    /// takes a stored result, or claims the result of a prefetch in flight.
    case consumer
    /// ``PrefetchableTaskCoalescer/prefetch(key:priority:name:timeout:whenAbandoned:operation:)``:
    /// makes the work a prefetch, whose result is stored for the next consumer.
    case prefetcher
}

// MARK: - The state behind the lock

extension TaskCoalescingCore {
    /// A result a prefetch stored for its consumer.
    @usableFromInline
    struct Prefetched: Sendable {
        let value: Value
        let expiry: ContinuousClock.Instant
    }

    /// Work that ended while callers waited for it: what to do once the lock is released.
    struct Ended {
        var tasks: [Task<Void, Never>] = []
        var continuations: [Work.Continuation] = []

        /// Cancels the tasks first, so that running work sees `isCancelled` before any caller
        /// hears `CancellationError`.
        func carryOut() {
            for task in tasks {
                task.cancel()
            }
            for continuation in continuations {
                continuation.resume(throwing: CancellationError())
            }
        }
    }

    /// What to do after a caller withdrew.
    @usableFromInline
    struct Withdrawal {
        /// The caller's continuation, if it had parked; resumed with the withdrawal's error.
        @usableFromInline let continuation: Work.Continuation?
        /// The work's task, to cancel because its last caller withdrew.
        @usableFromInline let abandonedTask: Task<Void, Never>?

        @usableFromInline
        init(continuation: Work.Continuation?, abandonedTask: Task<Void, Never>?) {
            self.continuation = continuation
            self.abandonedTask = abandonedTask
        }
    }

    @usableFromInline
    struct State: Sendable {
        /// Work in flight that a new caller joins, by key. Holds only running work: work is taken out of it
        /// in the same step as it ends, is cancelled or is forgotten.
        @usableFromInline var index: [Key: Work] = [:]
        /// Forgotten work still in flight, so that ``cancelAll()`` reaches it.
        var forgotten: [ObjectIdentifier: Work] = [:]
        var stored: [Key: Prefetched] = [:]
        /// The earliest expiry among `stored`, or later; nil when nothing is stored.
        @usableFromInline var nextExpiry: ContinuousClock.Instant?
        @usableFromInline var statistics = CoalescingStatistics()
        @usableFromInline let events: EventChannel<Key>?

        /// Whether an observer wants events.
        @inlinable
        var isObserved: Bool { events != nil }
        let prefetchTimeout: Duration
        let now: @Sendable () -> ContinuousClock.Instant

        init(
            events: EventChannel<Key>?, prefetchTimeout: Duration,
            now: @escaping @Sendable () -> ContinuousClock.Instant
        ) {
            self.events = events
            self.prefetchTimeout = prefetchTimeout
            self.now = now
        }

        /// A caller arrives: takes a stored result, joins the work in flight, or starts it with
        /// `startTask`. Returns how it arrived, and sets the task to escalate to its priority.
        @inlinable
        mutating func arrive(
            key: Key,
            as role: CallerRole,
            callerPriority: TaskPriority,
            startPriority: TaskPriority,
            whenAbandoned: AbandonedWorkPolicy,
            escalating escalation: inout Task<Void, Never>?,
            startTask: (Work, TaskPriority) -> Task<Void, Never>
        ) -> Arrival {
            // Nothing is stored while `nextExpiry` is nil: most joins skip the look-up.
            if role != .plain, nextExpiry != nil, let arrival = takeStored(key, as: role) {
                return arrival
            }
            if let work = index[key] {
                let slot = work.join(as: role, priority: callerPriority, escalating: &escalation)
                statistics.recordJoin()
                if isObserved {
                    recordJoin(of: work, escalatedTo: escalation == nil ? nil : callerPriority)
                }
                return .waiting(work, slot: slot)
            }
            return start(
                key: key, as: role, startPriority: startPriority, whenAbandoned: whenAbandoned, startTask: startTask)
        }

        @usableFromInline
        func recordJoin(of work: Work, escalatedTo priority: TaskPriority?) {
            events?.record(.callerJoined(key: work.key, callers: work.callerCount))
            if let priority {
                events?.record(.priorityChanged(key: work.key, priority: .task(priority)))
            }
        }

        /// A prefetched result for `key`, if one is stored: a consumer takes it, a prefetcher
        /// leaves it. Nil if none is.
        @usableFromInline
        mutating func takeStored(_ key: Key, as role: CallerRole) -> Arrival? {
            releaseExpired()
            guard stored[key] != nil else { return nil }
            guard role == .consumer else { return .alreadyStored }
            // Counted as a caller that joined the prefetch's work and was served by it.
            statistics.callersJoined += 1
            statistics.callersServed += 1
            return .taken(stored.removeValue(forKey: key)!.value)
        }

        @usableFromInline
        mutating func start(
            key: Key,
            as role: CallerRole,
            startPriority: TaskPriority,
            whenAbandoned: AbandonedWorkPolicy,
            startTask: (Work, TaskPriority) -> Task<Void, Never>
        ) -> Arrival {
            let work = Work(
                key: key, role: role, priority: startPriority, whenAbandoned: whenAbandoned,
                startedAt: events == nil ? nil : .now)
            work.attach(startTask(work, startPriority))
            index[key] = work
            statistics.workStarted += 1
            events?.record(.workStarted(key: key))
            return .waiting(work, slot: 0)
        }

        @inlinable
        mutating func withdraw(_ work: Work, slot: Int, reason: WithdrawalReason) -> Withdrawal? {
            guard let (continuation, isLast) = work.withdraw(slot, reason: reason) else { return nil }
            statistics.recordWithdrawal(reason)
            if isObserved {
                recordWithdrawal(of: work, reason: reason)
            }
            guard isLast, work.whenAbandoned == .cancel else {
                return Withdrawal(continuation: continuation, abandonedTask: nil)
            }
            return Withdrawal(continuation: continuation, abandonedTask: abandon(work))
        }

        @usableFromInline
        func recordWithdrawal(of work: Work, reason: WithdrawalReason) {
            events?.record(.callerWithdrawn(key: work.key, reason: reason))
        }

        /// Cancels `work`, whose last caller withdrew; returns its task to cancel.
        @usableFromInline
        mutating func abandon(_ work: Work) -> Task<Void, Never>? {
            end(work, with: .failure(CancellationError())).task
        }

        /// The work returned or threw: stores a prefetch's value for its consumer if none claimed
        /// it, and returns the continuations to resume with `result`. Nothing if the work was
        /// cancelled or abandoned first.
        mutating func settle(_ work: Work, with result: Result<Value, Error>) -> [Work.Continuation] {
            guard work.isRunning else { return [] }
            // A forgotten prefetch is not stored: the next caller must start fresh work.
            if work.isUnclaimedPrefetch, work.isIndexed, case .success(let value) = result {
                store(value, for: work.key)
            }
            return end(work, with: result).continuations
        }

        mutating func cancel(key: Key) -> (found: Bool, Ended) {
            let dropped = stored.removeValue(forKey: key) != nil
            var ended = Ended()
            guard let work = index[key] else { return (dropped, ended) }
            cancel(work, into: &ended)
            return (true, ended)
        }

        mutating func cancelAll() -> (found: Bool, Ended) {
            let found = !index.isEmpty || !forgotten.isEmpty || !stored.isEmpty
            var ended = Ended()
            for work in Array(index.values) + Array(forgotten.values) {
                cancel(work, into: &ended)
            }
            stored.removeAll()
            nextExpiry = nil
            return (found, ended)
        }

        mutating func forget(key: Key) -> Bool {
            let dropped = stored.removeValue(forKey: key) != nil
            guard let work = index.removeValue(forKey: key) else { return dropped }
            work.isIndexed = false
            forgotten[ObjectIdentifier(work)] = work
            return true
        }

        private mutating func cancel(_ work: Work, into ended: inout Ended) {
            let (task, continuations) = end(work, with: .failure(CancellationError()))
            if let task {
                ended.tasks.append(task)
            }
            ended.continuations += continuations
        }

        /// Ends `work` with `result`: takes it out of the index, counts and reports its end, and
        /// returns its task and the continuations of the callers parked in it.
        private mutating func end(
            _ work: Work, with result: Result<Value, Error>
        ) -> (task: Task<Void, Never>?, continuations: [Work.Continuation]) {
            let (task, served, continuations) = work.end(with: result)
            if work.isIndexed {
                if index[work.key] === work {
                    index[work.key] = nil
                }
                work.isIndexed = false
            } else {
                forgotten[ObjectIdentifier(work)] = nil
            }
            let outcome = WorkOutcome(result)
            statistics.recordEnd(outcome, callersServed: served)
            if let events {
                let duration = work.startedAt.map { ContinuousClock.now - $0 } ?? .zero
                events.record(.workEnded(key: work.key, outcome: outcome, callersServed: served, duration: duration))
            }
            return (task, continuations)
        }

        private mutating func store(_ value: Value, for key: Key) {
            let expiry = now().advanced(by: prefetchTimeout)
            stored[key] = Prefetched(value: value, expiry: expiry)
            nextExpiry = min(nextExpiry ?? expiry, expiry)
        }

        /// Drops expired results. Sweeps only once the earliest expiry has passed, so most calls pay
        /// one comparison.
        private mutating func releaseExpired() {
            guard let nextExpiry else { return }
            let now = now()
            guard now >= nextExpiry else { return }
            stored = stored.filter { $0.value.expiry > now }
            self.nextExpiry = stored.values.map(\.expiry).min()
        }
    }
}

// MARK: - One run of the work

/// What the work is to ``PrefetchableTaskCoalescer``.
@usableFromInline
enum PrefetchRole {
    case none
    /// A prefetch: its value is stored when it ends, unless a consumer claimed it.
    case unclaimed
    /// A prefetch a consumer waits for (in `slot`): its value is that consumer's.
    case claimed(slot: Int)
}

/// One run of the work for one key, and the callers waiting for it.
///
/// Callers suspend on continuations rather than on the work's `Task`, so that one whose task is
/// cancelled or whose timeout passes can withdraw at once while the others keep waiting. A caller
/// first reserves a slot (when it starts or joins the work), then parks its continuation there;
/// every state a slot can meet in between is handled, so no interleaving of settling,
/// cancellation, timeout and withdrawal resumes a continuation twice or never.
@usableFromInline
final class InFlightWork<Key: Hashable & Sendable, Value: Sendable>: @unchecked Sendable {
    // @unchecked: every `var` is read and written only under the lock of the
    // `TaskCoalescingCore` that created the work (its `state`), and the `let`s are Sendable.

    // Unsafe rather than checked: the slots resume each continuation exactly once (the tests drive
    // every interleaving), and the checked kind costs an allocation per caller.
    @usableFromInline typealias Continuation = UnsafeContinuation<Value, Error>

    /// One caller's place in the work.
    @usableFromInline
    enum Slot {
        /// Reserved by a caller that has not parked its continuation yet.
        case reserved
        /// Withdrew before parking: the continuation is resumed with the reason's error when parked.
        case withdrawnEarly(WithdrawalReason)
        case waiting(Continuation)
        /// Resumed, or parked after the outcome was decided.
        case done
    }

    @usableFromInline
    enum Phase {
        /// `callers` counts the slots reserved or waiting; `priority` is the highest of theirs.
        case running(task: Task<Void, Never>?, callers: Int, priority: TaskPriority)
        /// Kept for callers that reserved a slot but have not parked yet.
        case ended(Result<Value, Error>)
    }

    @usableFromInline let key: Key
    @usableFromInline let whenAbandoned: AbandonedWorkPolicy
    /// When the work started; only taken when an observer wants durations.
    let startedAt: ContinuousClock.Instant?
    @usableFromInline var phase: Phase
    @usableFromInline var slots: ContiguousArray<Slot> = [.reserved]
    @usableFromInline var prefetch: PrefetchRole
    /// False once the work left the coalescer's index: forgotten, cancelled or ended.
    var isIndexed = true

    /// Creates running work with slot 0 reserved for the caller that starts it.
    init(
        key: Key, role: CallerRole, priority: TaskPriority,
        whenAbandoned: AbandonedWorkPolicy, startedAt: ContinuousClock.Instant?
    ) {
        self.key = key
        self.whenAbandoned = whenAbandoned
        self.startedAt = startedAt
        phase = .running(task: nil, callers: 1, priority: priority)
        prefetch = role == .prefetcher ? .unclaimed : .none
    }

    var isRunning: Bool {
        if case .running = phase { true } else { false }
    }

    var callerCount: Int {
        if case .running(_, let callers, _) = phase { callers } else { 0 }
    }

    var isUnclaimedPrefetch: Bool {
        if case .unclaimed = prefetch { true } else { false }
    }

    func attach(_ task: Task<Void, Never>) {
        guard case .running(nil, let callers, let priority) = phase else {
            preconditionFailure("InFlightWork: a task attached twice, or after the work ended")
        }
        phase = .running(task: task, callers: callers, priority: priority)
    }

    /// Reserves a slot for a caller joining the work, and returns it. Sets `escalation` to the
    /// task to raise to `priority` if the caller is more urgent than the work.
    @inlinable
    func join(
        as role: CallerRole, priority: TaskPriority, escalating escalation: inout Task<Void, Never>?
    ) -> Int {
        guard case .running(let task, let callers, let current) = phase else {
            preconditionFailure("InFlightWork: a caller joined work that had ended")
        }
        let slot = slots.count
        slots.append(.reserved)
        let raised = priority > current
        phase = .running(task: task, callers: callers + 1, priority: raised ? priority : current)
        switch (role, prefetch) {
        case (.prefetcher, .none): prefetch = .unclaimed
        case (.consumer, .unclaimed): prefetch = .claimed(slot: slot)
        default: break
        }
        if raised {
            escalation = task
        }
        return slot
    }

    /// Parks `continuation` in `slot`; returns the outcome to resume it with at once, if it is
    /// already known.
    @inlinable
    func park(_ continuation: Continuation, in slot: Int) -> Result<Value, Error>? {
        switch (slots[slot], phase) {
        case (.reserved, .running):
            slots[slot] = .waiting(continuation)
            return nil
        case (.reserved, .ended(let result)):
            slots[slot] = .done
            return result
        case (.withdrawnEarly(let reason), _):
            slots[slot] = .done
            return .failure(reason.error)
        case (.waiting, _), (.done, _):
            preconditionFailure("InFlightWork: slot \(slot) parked twice")
        }
    }

    /// Withdraws the caller in `slot` while the work runs. Returns its continuation if it had
    /// parked, and whether it was the last caller; nil if the outcome was already decided (the
    /// caller gets it) or the caller had already withdrawn.
    @inlinable
    func withdraw(_ slot: Int, reason: WithdrawalReason) -> (Continuation?, isLast: Bool)? {
        guard case .running(let task, let callers, let priority) = phase else { return nil }
        let continuation: Continuation?
        switch slots[slot] {
        case .reserved:
            slots[slot] = .withdrawnEarly(reason)
            continuation = nil
        case .waiting(let parked):
            slots[slot] = .done
            continuation = parked
        case .withdrawnEarly, .done:
            return nil
        }
        if case .claimed(slot) = prefetch {
            // Withdrew without the value: it is the next consumer's.
            prefetch = .unclaimed
        }
        phase = .running(task: task, callers: callers - 1, priority: priority)
        return (continuation, callers == 1)
    }

    /// Decides the outcome. Returns the task, how many callers are served, and the parked
    /// continuations; callers that reserved a slot but have not parked find the outcome when they
    /// park.
    func end(
        with result: Result<Value, Error>
    ) -> (task: Task<Void, Never>?, served: Int, continuations: [Continuation]) {
        guard case .running(let task, let callers, _) = phase else {
            preconditionFailure("InFlightWork: the work ended twice")
        }
        phase = .ended(result)
        var continuations: [Continuation] = []
        continuations.reserveCapacity(callers)
        for index in slots.indices {
            if case .waiting(let continuation) = slots[index] {
                continuations.append(continuation)
                slots[index] = .done
            }
        }
        return (task, callers, continuations)
    }
}

extension WithdrawalReason {
    /// What a withdrawn caller throws.
    @usableFromInline
    var error: Error {
        switch self {
        case .withdrawn: CancellationError()
        case .timedOut: CoalescingError.timedOut
        }
    }
}
