#if Postgres
import CoalescingOperations
import Foundation
import Logging

/// Runs identical work once across every process that shares a PostgreSQL database, and hands its
/// result to every caller in every process.
///
/// ```swift
/// import CoalescingPostgres
///
/// let profiles = try PostgresCoalescer<Profile>(
///     configuration: PostgresCoalescerConfiguration(url: "postgres://app@127.0.0.1:5432/app"))
///
/// func profile(id: String) async throws -> Profile {
///     try await profiles.value(key: "profile:\(id)", timeout: .seconds(5)) {
///         try await api.fetchProfile(id: id)
///     }
/// }
/// ```
///
/// Callers in one process join an ``InFlightTaskCoalescer`` first, so a process holds at most one
/// database step per key; the step queues on a session advisory lock for the key and either reads
/// the result another process published after it arrived, or runs the work and publishes it. See
/// the article "Coalescing across processes" for the table, the permissions and what to monitor,
/// and Guarantees 28 to 35 for the contract.
///
/// - Per-caller timeouts and withdrawal work as in the in-process coalescer: only that caller gives
///   up. When the last caller of this process has gone, `whenAbandoned` decides whether this
///   process's database step is dropped (its lock wait ends, or its work is cancelled and another
///   process takes over) or runs to its end.
/// - ``cancel(key:)`` and ``cancelAll()`` act on this process only. ``forget(key:)`` makes this
///   process's next caller wait for a run that starts after it, in any process.
/// - The value crosses processes as JSON in a `bytea` column, up to
///   ``PostgresCoalescerConfiguration/maximumValueBytes``.
public final class PostgresCoalescer<Value: Codable & Sendable>: Sendable {
    private let local: InFlightTaskCoalescer<String, Value>
    private let step: DatabaseStep
    private let recorder: StepRecorder
    private let forgotten = ForgottenKeys()

    /// Creates a coalescer; it connects only when work is asked for.
    ///
    /// - Parameters:
    ///   - configuration: The database, the table, and what to do while the database is unavailable.
    ///   - logger: Logs the database becoming unavailable (once) and available again, and results
    ///     that could not be published.
    ///   - observer: Receives every ``PostgresCoalescingEvent``, on the thread that made the step,
    ///     the in-process coalescer's events included as ``PostgresCoalescingEvent/local(_:)``.
    /// - Throws: ``CoalescingPostgresError/invalidConfiguration(_:)`` for a table name that is not a
    ///   plain identifier or a maximum value size out of range.
    public init(
        configuration: PostgresCoalescerConfiguration,
        logger: Logger = Logger(label: "CoalescingPostgres"),
        observer: (@Sendable (PostgresCoalescingEvent) -> Void)? = nil
    ) throws {
        recorder = StepRecorder(logger: logger, observer: observer)
        step = DatabaseStep(configuration: try configuration.validated(), recorder: recorder)
        let localObserver: (@Sendable (CoalescingEvent<String>) -> Void)? =
            if let observer { { observer(.local($0)) } } else { nil }
        local = InFlightTaskCoalescer(observer: localObserver)
    }

    /// Returns the result of the work for `key` in flight in any process sharing the database, or
    /// runs `operation` here if there is none.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work, in every process: a string that names it.
    ///   - timeout: How long this caller waits at most; when it passes, this caller alone throws
    ///     `CoalescingError.timedOut`.
    ///   - whenAbandoned: What happens to this process's step when its last caller withdraws, for
    ///     the caller that starts it.
    ///   - operation: The work, run in this process if it takes the key's lock.
    /// - Returns: The work's value, the same for every caller in every process.
    /// - Throws: The work's error, when it ran here; ``CoalescingPostgresError`` for what another
    ///   process reported or the database's absence under ``DatabaseUnavailablePolicy/fail``;
    ///   `CancellationError` or `CoalescingError` as the in-process coalescer throws them.
    public func value(
        key: String,
        timeout: Duration? = nil,
        whenAbandoned: AbandonedWorkPolicy = .cancel,
        operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        try await local.value(
            key: key, name: "coalescing-postgres \(key)", timeout: timeout, whenAbandoned: whenAbandoned
        ) {
            [step, forgotten] in
            try await step.run(key: key, freshOnly: forgotten.take(key), operation: operation)
        }
    }

    /// Cancels this process's step for `key`: its callers throw `CancellationError`. Local: if this
    /// process ran the work, another process waiting for the key takes over and runs it.
    ///
    /// - Parameter key: The key whose step to cancel.
    /// - Returns: Whether a step was in flight here for `key`.
    @discardableResult public func cancel(key: String) -> Bool {
        local.cancel(key: key)
    }

    /// Cancels every step of this process; other processes are not told.
    ///
    /// - Returns: Whether any step was in flight here.
    @discardableResult public func cancelAll() -> Bool {
        local.cancelAll()
    }

    /// Makes this process's next caller of `key` start a new step that accepts only a run started
    /// after it, in any process: use it after a write. Callers already waiting keep their step.
    ///
    /// - Parameter key: The key to forget.
    /// - Returns: Whether a step was in flight here for `key`.
    @discardableResult public func forget(key: String) -> Bool {
        forgotten.insert(key)
        return local.forget(key: key)
    }

    /// What this process's coalescer has done, across processes and within this one.
    public var statistics: PostgresCoalescingStatistics {
        var statistics = recorder.snapshot
        statistics.local = local.statistics
        return statistics
    }
}

/// The keys forgotten since their last step started. `@unchecked Sendable`: `lock` guards `keys`.
final class ForgottenKeys: @unchecked Sendable {
    private let lock = NSLock()
    private var keys = Set<String>()

    func insert(_ key: String) { _ = lock.withLock { keys.insert(key) } }
    func take(_ key: String) -> Bool { lock.withLock { keys.remove(key) != nil } }
}
#else
/// Whether this build has the `Postgres` trait: false here. Enable it to get `PostgresCoalescer`:
/// `.package(url: …, from: …, traits: ["Postgres"])`, or `swift build --traits Postgres`.
public let coalescingPostgresIsAvailable = false
#endif
