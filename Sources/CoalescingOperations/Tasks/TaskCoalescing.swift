/// How a task caller arrives at the engine: the one entry both task coalescers share.
///
/// A caller registers with one short critical section on its own thread, without queueing behind
/// the other callers on an actor, and parks on a continuation; the work runs in a detached task of
/// its own. Waiting, withdrawing, timing out and escalating are the engine's.
extension Engine {
    /// Registers a caller of `key`: takes a stored result, joins the work in flight for it, or
    /// starts `operation` in a task of its own. Never suspends, so concurrent callers always find
    /// each other.
    ///
    /// Inlinable, like the rest of the join path, so that it is specialized for the caller's `Key`
    /// and `Value`: unspecialized, every join looked up generic metadata at run time. Never inlined:
    /// inlined into the async caller, its locals joined the caller's async frame, which then
    /// outgrew the task's first slab and cost every waiter an allocation.
    @inlinable @inline(never) func arrive<Value: Sendable>(
        key: Key,
        as role: CallerRole,
        priority: TaskPriority?,
        name: String?,
        timeout: Duration?,
        whenAbandoned: AbandonedWorkPolicy,
        progress: (@Sendable (WorkProgress) -> Void)? = nil,
        operation: @escaping @Sendable () async throws -> Value
    ) -> TaskArrival<Key, Value> {
        let watcher = progress.map { Watcher(queue: nil, onProgress: $0) }
        let callerPriority = Task.currentPriority
        let caller = Caller<Value>.task(nil, consumes: role == .consumer)
        // Returned rather than captured: a `var` the closure mutates may cost an allocation.
        let (arrival, entry) = state.withLock { registry -> (TaskArrival<Key, Value>, Entry<Value>?) in
            if role != .plain, registry.nextExpiry != nil {
                if role == .consumer, let value = registry.takeStored(key, as: Value.self) {
                    return (.taken(value), nil)
                }
                if role == .prefetcher, registry.hasStored(key) {
                    return (.alreadyStored, nil)
                }
            }
            if let work = registry.inFlight(key, as: Value.self) {
                work.isPrefetch = work.isPrefetch || role == .prefetcher
                let (slot, raised) = registry.join(work, caller, asking: Urgency(callerPriority), watching: watcher)
                return (
                    .waiting(work, slot: slot, arrivedAt: callerPriority),
                    Entry(work, slot: slot, raised: raised)
                )
            }
            let startPriority = priority ?? callerPriority
            let work = Work<Key, Value>(
                key: key, runner: .task(nil), policy: whenAbandoned, floor: Urgency(startPriority),
                timed: registry.events != nil)
            work.isPrefetch = role == .prefetcher
            registry.start(work)
            let slot = registry.join(work, caller, asking: nil, watching: watcher).slot
            work.attach(
                .task(
                    startTask(for: work, name: name, priority: startPriority) { [self] in
                        let result: Result<Value, Error>
                        do {
                            result = .success(try await operation())
                        } catch {
                            result = .failure(error)
                        }
                        settle(work, with: result)
                    }))
            return (
                .waiting(work, slot: slot, arrivedAt: callerPriority),
                Entry(work, slot: slot, started: true)
            )
        }
        follow(entry, timeout: timeout, watcher: watcher)
        return arrival
    }

    /// Starts the work in a task of its own. Detached, so that it inherits none of the starting
    /// caller's task-local values (a request ID, a trace span, credentials): its context is
    /// nobody's in particular. It keeps the starting priority, raised as callers join, and reports
    /// its progress through ``ProgressReporter/current``.
    @usableFromInline func startTask(
        for work: AnyWork<Key>, name: String?, priority: TaskPriority, operation: @escaping @Sendable () async -> Void
    ) -> Task<Void, Never> {
        let reporter = ProgressReporter(work: work.number) { [self] in report($0, for: work) }
        let operation = { @Sendable in await ProgressReporter.$bound.withValue(reporter, operation: operation) }
        #if compiler(>=6.2)
        return Task.detached(name: name, priority: priority, operation: operation)
        #else
        return Task.detached(priority: priority, operation: operation)
        #endif
    }
}

/// How a task caller arrived.
@usableFromInline enum TaskArrival<Key: Hashable & Sendable, Value: Sendable> {
    /// The caller started or joined work and has a slot in it; it arrived at `arrivedAt`.
    case waiting(Work<Key, Value>, slot: Int, arrivedAt: TaskPriority)
    /// A consumer took the prefetched value; nothing to wait for.
    case taken(Value)
    /// A prefetcher found a result already stored; nothing to do.
    case alreadyStored
}

/// What a caller is to a task coalescer, which decides how it treats prefetched results.
@usableFromInline enum CallerRole {
    /// ``InFlightTaskCoalescer``: nothing is ever stored.
    case plain
    /// ``PrefetchableTaskCoalescer/deduplicated(key:priority:name:timeout:whenAbandoned:operation:)``:
    /// takes a stored result; a prefetch it waits for stores nothing.
    case consumer
    /// ``PrefetchableTaskCoalescer/prefetch(key:priority:name:timeout:whenAbandoned:operation:)``:
    /// makes the work a prefetch, whose result is stored if no consumer waits for it.
    case prefetcher
}
