/// The actor users copy from seed 001: a dictionary of in-flight `Task`s keyed by request.
///
/// A caller that finds a task for its key awaits that task's value; otherwise it starts a task,
/// registers it before awaiting, and removes it when the task ends. Kept as written: a waiter
/// whose own task is cancelled keeps waiting until the shared task ends (awaiting `Task.value`
/// does not react to the waiter's cancellation), and the `defer` may remove a newer task that was
/// registered under the same key after ``cancel(key:)``.
actor TaskDictionaryCoalescer<Key: Hashable & Sendable, Value: Sendable> {
    private var inFlightTasks: [Key: Task<Value, Error>] = [:]

    init() {}

    func deduplicated(
        key: Key,
        priority: TaskPriority? = nil,
        name: String? = nil,
        operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        if let existingTask = inFlightTasks[key] {
            return try await existingTask.value
        }
        let task = Task(name: name, priority: priority) {
            try await operation()
        }
        inFlightTasks[key] = task
        defer { inFlightTasks[key] = nil }
        return try await task.value
    }

    @discardableResult
    func cancel(key: Key) -> Bool {
        guard let task = inFlightTasks[key] else { return false }
        task.cancel()
        inFlightTasks[key] = nil
        return true
    }

    func cancelAll() {
        inFlightTasks.values.forEach { $0.cancel() }
        inFlightTasks.removeAll()
    }
}
