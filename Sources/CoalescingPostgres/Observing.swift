#if Postgres
import CoalescingOperations
import Foundation
import Logging

/// What a ``PostgresCoalescer`` did across processes, beside what its in-process coalescer did.
public struct PostgresCoalescingStatistics: Sendable, Equatable, CustomStringConvertible {
    /// The in-process coalescer's counts: every caller of this process, joined or not.
    public internal(set) var local = CoalescingStatistics()
    /// Database steps that took the key's lock and ran the work in this process.
    public internal(set) var runsHere = 0
    /// Of ``runsHere``: runs that waited for another process's lock and found no result, because
    /// that process died, lost its connection or gave its work up: a take-over.
    public internal(set) var takeOvers = 0
    /// Database steps served the value another process published: the runs saved across the fleet.
    public internal(set) var servedFromAnotherProcess = 0
    /// Database steps that received another process's failure (its work threw, or its value was
    /// too large to publish).
    public internal(set) var failuresFromAnotherProcess = 0
    /// Database steps that could not use the database, whatever the policy did then.
    public internal(set) var databaseUnavailable = 0
    /// Of ``databaseUnavailable``: steps that ran the work locally, under
    /// ``DatabaseUnavailablePolicy/runLocally``.
    public internal(set) var ranWithoutDatabase = 0
    /// Results (values or failures) this process could not publish, because its connection was
    /// lost; the processes that waited for them run the work themselves.
    public internal(set) var publishFailures = 0
    /// Values that encoded to more than the configured maximum and were published as a failure.
    public internal(set) var valuesTooLarge = 0

    /// Everything at zero.
    public init() {}

    /// The counts on one line, for logs.
    public var description: String {
        "runsHere \(runsHere) (takeOvers \(takeOvers)), servedFromAnotherProcess \(servedFromAnotherProcess), "
            + "failuresFromAnotherProcess \(failuresFromAnotherProcess), databaseUnavailable \(databaseUnavailable) "
            + "(ranWithoutDatabase \(ranWithoutDatabase)), publishFailures \(publishFailures), "
            + "valuesTooLarge \(valuesTooLarge); local: \(local)"
    }
}

/// One step of a ``PostgresCoalescer``, handed to its observer: the in-process coalescer's events,
/// and those of the database step that the in-process work runs.
public enum PostgresCoalescingEvent: Sendable, CustomStringConvertible {
    /// An event of the in-process coalescer that every caller of this process goes through.
    case local(CoalescingEvent<String>)
    /// This process took the key's lock and starts the work; `tookOver` when it had waited for
    /// another process that published nothing.
    case ranHere(key: String, tookOver: Bool)
    /// This process received the value another process published; `waited` runs from the step's
    /// arrival at the database to the value's decoding: the price of joining another instance.
    case servedFromAnotherProcess(key: String, waited: Duration)
    /// This process received another process's failure.
    case failedInAnotherProcess(key: String, error: CoalescingPostgresError)
    /// The database could not be used for `key`; the policy decides what the callers get.
    case databaseUnavailable(key: String, error: String)
    /// The database answered again after being unavailable.
    case databaseAvailableAgain
    /// A result could not be published: the other processes waiting will run the work.
    case publishFailed(key: String, error: String)

    /// The event on one line, for logs.
    public var description: String {
        switch self {
        case .local(let event): "local.\(event)"
        case .ranHere(let key, let tookOver): "ranHere(key: \(key), tookOver: \(tookOver))"
        case .servedFromAnotherProcess(let key, let waited): "servedFromAnotherProcess(key: \(key), waited: \(waited))"
        case .failedInAnotherProcess(let key, let error): "failedInAnotherProcess(key: \(key), error: \(error))"
        case .databaseUnavailable(let key, let error): "databaseUnavailable(key: \(key), error: \(error))"
        case .databaseAvailableAgain: "databaseAvailableAgain"
        case .publishFailed(let key, let error): "publishFailed(key: \(key), error: \(error))"
        }
    }
}

/// Counts, reports and logs the database steps' outcomes. `@unchecked Sendable`: `lock` guards
/// `statistics`, `unavailable`, `schemaReady` and `connections`.
final class StepRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var statistics = PostgresCoalescingStatistics()
    private var unavailable = false
    private var schemaReady = false
    private var connections = 0
    let logger: Logger
    let observer: (@Sendable (PostgresCoalescingEvent) -> Void)?

    init(logger: Logger, observer: (@Sendable (PostgresCoalescingEvent) -> Void)?) {
        self.logger = logger
        self.observer = observer
    }

    var snapshot: PostgresCoalescingStatistics { lock.withLock { statistics } }
    var isSchemaReady: Bool { lock.withLock { schemaReady } }
    func markSchemaReady() { lock.withLock { schemaReady = true } }
    func nextConnectionID() -> Int {
        lock.withLock {
            connections += 1; return connections
        }
    }

    func record(_ event: PostgresCoalescingEvent, _ count: (inout PostgresCoalescingStatistics) -> Void) {
        lock.withLock { count(&statistics) }
        observer?(event)
    }

    /// Logs the first failure of a run of failures, and no other: a fleet whose database is down
    /// would otherwise log once per request.
    func databaseUnavailable(key: String, error: any Error, ranLocally: Bool) {
        let message = String(reflecting: error)
        let first = lock.withLock {
            statistics.databaseUnavailable += 1
            if ranLocally { statistics.ranWithoutDatabase += 1 }
            defer { unavailable = true }
            return !unavailable
        }
        if first {
            logger.error(
                "the database is unavailable; until it answers again, work \(ranLocally ? "runs in each process" : "fails")",
                metadata: ["key": "\(key)", "error": "\(message)"])
        }
        observer?(.databaseUnavailable(key: key, error: message))
    }

    func databaseAnswered() {
        let wasUnavailable = lock.withLock {
            defer { unavailable = false }
            return unavailable
        }
        if wasUnavailable {
            logger.notice("the database answers again; work runs once across processes")
            observer?(.databaseAvailableAgain)
        }
    }
}
#endif
