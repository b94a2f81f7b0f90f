/// Runs identical concurrent async work once and hands its result to every caller.
///
/// While work for a key is in flight, every further call with that key waits for it instead of
/// starting its own; once the work ends, the next call starts new work (coalescing is not caching):
///
/// ```swift
/// let profiles = InFlightTaskCoalescer<String, Profile>()
///
/// func profile(id: String) async throws -> Profile {
///     try await profiles.deduplicated(key: id, name: "profile \(id)") {
///         try await api.fetchProfile(id: id)
///     }
/// }
/// ```
///
/// - A caller is registered before anything is awaited, so concurrent callers always find it.
/// - A caller whose own task is cancelled throws `CancellationError` at once; the work goes on for
///   the others, and is cancelled when the last caller has left.
/// - Work that throws hands its error to every caller, and frees the key.
/// - A caller more urgent than the work raises the work's priority (Swift 6.2 runtimes).
/// - Waiting costs no thread: callers suspend on continuations.
public actor InFlightTaskCoalescer<Key: Hashable & Sendable, Value: Sendable> {
    private var calls = InFlightCallTable<Key, Value>()

    /// Creates a coalescer with nothing in flight.
    public init() {}

    /// Returns the result of the work in flight for `key`, starting `operation` if there is none.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work. Include everything that makes them differ.
    ///   - priority: The priority of the task that runs `operation`, if this call starts it.
    ///     Defaults to the caller's.
    ///   - name: A name for that task, shown by debuggers (Swift 6.2 and later).
    ///   - operation: The work. Runs in a task of its own, so it outlives any one caller; it sees
    ///     `Task.isCancelled` when the last caller left or ``cancel(key:)`` was called.
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: The work's error; or `CancellationError` if this caller's task was cancelled, or
    ///   the work was cancelled through ``cancel(key:)`` or ``cancelAll()``.
    public func deduplicated(
        key: Key,
        priority: TaskPriority? = nil,
        name: String? = nil,
        operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        try Task.checkCancellation()
        let (call, slot) = calls.reserve(key, priority: priority, name: name, operation: operation) { call in
            await self.forget(call, key: key)
        }
        return try await call.wait(in: slot)
    }

    /// Cancels the work in flight for `key`: its callers throw `CancellationError` at once, and
    /// the next call for `key` starts new work.
    ///
    /// - Parameter key: The key of the work to cancel.
    /// - Returns: False if no work was in flight for `key`.
    @discardableResult
    public func cancel(key: Key) -> Bool {
        calls.cancel(key)
    }

    /// Cancels all work in flight, for example when the user logs out.
    public func cancelAll() {
        calls.cancelAll()
    }

    /// How many callers wait for the work in flight for `key`; for tests.
    func waitingCount(for key: Key) -> Int {
        calls.waitingCount(for: key)
    }

    private func forget(_ call: InFlightCall<Value>, key: Key) {
        calls.remove(key, ifSameAs: call)
    }
}
