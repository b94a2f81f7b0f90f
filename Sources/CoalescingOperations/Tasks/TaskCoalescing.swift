/// What runs a task coalescer's work, and how its callers arrive: the engine's `arrive(key:…)`
/// registers a caller with one short critical section on its own thread, without queueing behind
/// the other callers on an actor; the caller parks on a continuation, and the work runs in a
/// detached task of its own. Waiting, withdrawing, timing out and escalating are the engine's.
extension Engine {
    /// Starts the work in a task of its own. Detached, so that it inherits none of the starting
    /// caller's task-local values (a request ID, a trace span, credentials): its context is
    /// nobody's in particular. It keeps the starting priority, raised as callers join, and reports
    /// its progress through ``ProgressReporter/current``.
    @usableFromInline func startTask<Value>(
        for work: Work<Key, Value>, name: String?, priority: TaskPriority,
        operation: @escaping @Sendable () async -> Void
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

/// What a caller is to a task coalescer, which decides how it treats prefetched results.
@usableFromInline enum CallerRole {
    /// ``InFlightTaskCoalescer``: nothing is ever stored.
    case plain
    /// ``PrefetchableTaskCoalescer/value(key:priority:name:timeout:whenAbandoned:progress:operation:)``:
    /// takes a stored result; a prefetch it waits for stores nothing.
    case consumer
    /// ``PrefetchableTaskCoalescer/prefetch(key:priority:name:timeout:whenAbandoned:operation:)``:
    /// makes the work a prefetch, whose result is stored if no consumer waits for it.
    case prefetcher
}
