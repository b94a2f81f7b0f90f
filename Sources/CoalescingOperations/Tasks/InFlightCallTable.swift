/// The in-flight calls of one coalescer, by key. Owned by the coalescer's actor, so that finding a
/// call and reserving a place in it happen in one step with no suspension in between.
struct InFlightCallTable<Key: Hashable & Sendable, Value: Sendable> {
    private var calls: [Key: InFlightCall<Value>] = [:]

    /// Reserves a place in the call in flight for `key`, or in a new one running `operation` when
    /// there is none (or the one there has ended or been abandoned).
    ///
    /// - Parameters:
    ///   - key: The work's key.
    ///   - priority: The priority of the task running `operation`, if new work starts.
    ///   - name: The name of that task.
    ///   - operation: The work, if new work starts.
    ///   - onEnd: Called when new work ends; the owner must then call ``remove(_:ifSameAs:)``.
    ///     Only evaluated when new work starts.
    /// - Returns: The call, and the slot reserved in it for this caller.
    mutating func reserve(
        _ key: Key,
        priority: TaskPriority?,
        name: String?,
        operation: @escaping @Sendable () async throws -> Value,
        onEnd: @autoclosure () -> @Sendable (InFlightCall<Value>) async -> Void
    ) -> (call: InFlightCall<Value>, slot: Int) {
        if let call = calls[key], let slot = call.reserve(escalatingTo: Task.currentPriority) {
            return (call, slot)
        }
        let started = InFlightCall.start(priority: priority, name: name, operation: operation, onEnd: onEnd())
        calls[key] = started.call
        return started
    }

    /// Forgets `call`, unless new work has taken its key since.
    mutating func remove(_ key: Key, ifSameAs call: InFlightCall<Value>) {
        if calls[key] === call {
            calls[key] = nil
        }
    }

    /// Cancels the work for `key`; returns false if none was in flight.
    mutating func cancel(_ key: Key) -> Bool {
        guard let call = calls.removeValue(forKey: key) else { return false }
        call.cancel()
        return true
    }

    /// How many callers wait for the work in flight for `key`; for tests.
    func waitingCount(for key: Key) -> Int {
        calls[key]?.waitingCount ?? 0
    }

    mutating func cancelAll() {
        let cancelled = calls.values
        calls.removeAll()
        cancelled.forEach { $0.cancel() }
    }
}
