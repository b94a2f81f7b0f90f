#if Postgres
import CoalescingOperations
import Foundation
import Logging
import NIOConcurrencyHelpers

/// What a ``PostgresCoalescer`` did across processes, beside what its in-process coalescer did.
public struct PostgresCoalescingStatistics: Sendable, Equatable, CustomStringConvertible {
    /// The in-process coalescer's counts: every caller of this process, joined or not.
    public internal(set) var local = CoalescingStatistics()
    /// Database steps that took the key's lock and ran the work in this process.
    public internal(set) var runsHere = 0
    /// Of ``runsHere``: runs that replaced another process's, because its leader died, lost its
    /// session or gave its work up without a result: a take-over. A run that starts because the
    /// last result was published before its callers arrived is not one.
    public internal(set) var takeOvers = 0
    /// Database steps served the value another process published: the runs saved across the fleet.
    public internal(set) var servedFromAnotherProcess = 0
    /// Database steps that received another process's failure (its work threw, or its value was
    /// too large to publish).
    public internal(set) var failuresFromAnotherProcess = 0
    /// Database steps that could not reach the database, whatever the policy did then.
    public internal(set) var databaseUnavailable = 0
    /// Of ``databaseUnavailable``: steps that ran the work locally, under
    /// ``DatabaseUnavailablePolicy/runLocally``.
    public internal(set) var ranWithoutDatabase = 0
    /// Database steps whose callers received ``CoalescingPostgresError/databaseError(sqlState:message:)``:
    /// the database answered, with an error that is not an outage.
    public internal(set) var databaseErrors = 0
    /// Results (values or failures) this process could not publish; the processes that waited
    /// for them take over.
    public internal(set) var publishFailures = 0
    /// Values that encoded to more than the configured maximum and were published as a failure.
    public internal(set) var valuesTooLarge = 0
    /// Locks this process held for running work when its session ended under them (the session
    /// was terminated, its network failed): another process may have taken over beside it.
    public internal(set) var locksLost = 0

    /// Everything at zero.
    public init() {}

    /// The counts on one line, for logs.
    public var description: String {
        "runsHere \(runsHere) (takeOvers \(takeOvers)), servedFromAnotherProcess \(servedFromAnotherProcess), "
            + "failuresFromAnotherProcess \(failuresFromAnotherProcess), databaseUnavailable \(databaseUnavailable) "
            + "(ranWithoutDatabase \(ranWithoutDatabase)), databaseErrors \(databaseErrors), "
            + "publishFailures \(publishFailures), valuesTooLarge \(valuesTooLarge), locksLost \(locksLost); "
            + "local: \(local)"
    }
}

/// One step of a ``PostgresCoalescer``, handed to its observer: the in-process coalescer's events,
/// and those of the database step that the in-process work runs.
public enum PostgresCoalescingEvent: Sendable, CustomStringConvertible {
    /// An event of the in-process coalescer that every caller of this process goes through.
    case local(CoalescingEvent<String>)
    /// This process took the key's lock and starts the work; `tookOver` when it replaces another
    /// process's run that ended without a result (see ``PostgresCoalescingStatistics/takeOvers``).
    case ranHere(key: String, tookOver: Bool)
    /// This process's step for `key` found the key's lock held by another process's run (or by
    /// another local step whose key shares the lock), and waits for its result.
    case waitingForAnotherProcess(key: String)
    /// This process received the value another process published; `waited` runs from the step's
    /// arrival to the value's decoding: the price of joining another process's run.
    case servedFromAnotherProcess(key: String, waited: Duration)
    /// This process received another process's failure.
    case failedInAnotherProcess(key: String, error: CoalescingPostgresError)
    /// The database could not be reached for `key`; the policy decides what the callers get.
    case databaseUnavailable(key: String, error: String)
    /// The database answered again after being unavailable.
    case databaseAvailableAgain
    /// The database answered a step with an error that is not an outage; its callers throw it.
    case databaseError(key: String, error: CoalescingPostgresError)
    /// A result could not be published: the other processes waiting take over.
    case publishFailed(key: String, error: String)
    /// The session ended while this process ran the work for `key`, and with it the key's lock:
    /// another process may take over beside this run, which goes on for its own callers.
    case lockLost(key: String, error: CoalescingPostgresError)

    /// Whether this is an in-process event that only repeats an outage the coalescer has already
    /// logged: a work that failed because the database could not be reached, under
    /// ``DatabaseUnavailablePolicy/fail``. Count it, trace it, but leave it out of the logs, or an
    /// outage logs once per step.
    public var repeatsAnOutage: Bool {
        guard case .local(.workEnded(_, _, .failed, let error?, _, _)) = self,
            case .databaseUnavailable? = error as? CoalescingPostgresError
        else { return false }
        return true
    }

    /// The event on one line, for logs.
    public var description: String {
        switch self {
        case .local(let event): "local.\(event)"
        case .ranHere(let key, let tookOver): "ranHere(key: \(key), tookOver: \(tookOver))"
        case .waitingForAnotherProcess(let key): "waitingForAnotherProcess(key: \(key))"
        case .servedFromAnotherProcess(let key, let waited): "servedFromAnotherProcess(key: \(key), waited: \(waited))"
        case .failedInAnotherProcess(let key, let error): "failedInAnotherProcess(key: \(key), error: \(error))"
        case .databaseUnavailable(let key, let error): "databaseUnavailable(key: \(key), error: \(error))"
        case .databaseAvailableAgain: "databaseAvailableAgain"
        case .databaseError(let key, let error): "databaseError(key: \(key), error: \(error))"
        case .publishFailed(let key, let error): "publishFailed(key: \(key), error: \(error))"
        case .lockLost(let key, let error): "lockLost(key: \(key), error: \(error))"
        }
    }
}

/// Counts, reports and logs the database steps' outcomes.
final class StepRecorder: Sendable {
    private struct State {
        var statistics = PostgresCoalescingStatistics()
        var unavailable = false
    }
    private let state = NIOLockedValueBox(State())
    let logger: Logger
    let observer: (@Sendable (PostgresCoalescingEvent) -> Void)?

    init(logger: Logger, observer: (@Sendable (PostgresCoalescingEvent) -> Void)?) {
        self.logger = logger
        self.observer = observer
    }

    var snapshot: PostgresCoalescingStatistics { state.withLockedValue { $0.statistics } }

    func record(_ event: PostgresCoalescingEvent, _ count: (inout PostgresCoalescingStatistics) -> Void) {
        state.withLockedValue { count(&$0.statistics) }
        if case .ranHere(let key, tookOver: true) = event {
            // Once per take-over, whatever the build: a leader's death is otherwise silent.
            logger.notice(
                "took over a run of another process that ended without a result (its leader died, lost its session or gave up)",
                metadata: ["key": "\(key.prefix(200))"])
        }
        observer?(event)
    }

    /// Logs the first failure of an outage, and no other: a fleet whose database is down would
    /// otherwise log once per step.
    func databaseUnavailable(key: String, error: CoalescingPostgresError, ranLocally: Bool) {
        let first = state.withLockedValue { state in
            state.statistics.databaseUnavailable += 1
            if ranLocally { state.statistics.ranWithoutDatabase += 1 }
            defer { state.unavailable = true }
            return !state.unavailable
        }
        if first {
            logger.error(
                "the database is unavailable; until it answers again, work \(ranLocally ? "runs in each process" : "fails")",
                metadata: ["key": "\(key.prefix(200))", "error": "\(error)"])
        }
        observer?(.databaseUnavailable(key: key, error: error.description))
    }

    func databaseAnswered() {
        let wasUnavailable = state.withLockedValue { state in
            defer { state.unavailable = false }
            return state.unavailable
        }
        if wasUnavailable {
            logger.notice("the database answers again; work runs once across processes")
            observer?(.databaseAvailableAgain)
        }
    }

    func databaseError(key: String, error: CoalescingPostgresError) {
        logger.warning(
            "the database refused a step", metadata: ["key": "\(key.prefix(200))", "error": "\(error)"])
        record(.databaseError(key: key, error: error)) { $0.databaseErrors += 1 }
    }

    /// Where the client that the coalescer made logs why it could not connect; nil for the app's
    /// own client, whose log is the app's.
    private let connectFailures = NIOLockedValueBox<ConnectFailures?>(nil)

    func watch(_ failures: ConnectFailures) {
        connectFailures.withLockedValue { $0 = failures }
    }

    /// Why no session could be had within `limit`, as precisely as the client said.
    func noSession(within limit: Duration) -> CoalescingPostgresError {
        let prefix = "could not open a session within \(limit)"
        guard let failures = connectFailures.withLockedValue({ $0 }) else {
            return .databaseUnavailable(
                "\(prefix): the database refuses or does not answer connections (the client's log says why, at "
                    + "info level: \"Connection creation failed\")")
        }
        guard let cause = failures.last else {
            return .databaseUnavailable("\(prefix): no connection attempt ended: no answer within \(limit)")
        }
        return .databaseUnavailable("\(prefix): \(cause)")
    }

    func lockLost(key: String, error: CoalescingPostgresError) {
        logger.warning(
            "the session ended while this process ran the work; another process may take over beside it",
            metadata: ["key": "\(key.prefix(200))", "error": "\(error)"])
        record(.lockLost(key: key, error: error)) { $0.locksLost += 1 }
    }
}

/// What the pool of a client the coalescer made said about its failed connection attempts: the
/// pool keeps them to itself (a step waiting for a connection only waits), and logs each at info
/// level with its fields, so the client's logger is wrapped to keep the last one, in words.
final class ConnectFailures: Sendable {
    private let lastCause = NIOLockedValueBox<String?>(nil)

    /// The last failed attempt's cause, if any failed.
    var last: String? { lastCause.withLockedValue { $0 } }

    /// `logger`, logging as before, that also keeps the cause of each failed connection attempt.
    func logger(wrapping logger: Logger) -> Logger {
        var wrapped = logger
        wrapped.handler = Handler(wrapped: logger.handler, failures: self)
        return wrapped
    }

    func record(_ text: String) {
        lastCause.withLockedValue { $0 = Self.cause(of: text) }
    }

    /// The pool logs `String(reflecting:)` of PostgresNIO's error: the fields, not the redacted
    /// description; the words say which of the usual causes it was.
    static func cause(of text: String) -> String {
        func field(_ name: String) -> String? {
            guard let start = text.range(of: "\(name): ")?.upperBound else { return nil }
            let rest = text[start...]
            return String(rest.prefix { $0 != "," && $0 != "]" && $0 != ")" })
        }
        let sqlState = field("sqlState")
        let message = field("message") ?? ""
        if let sqlState, sqlState.hasPrefix("28") {
            return "authentication failed (SQLSTATE \(sqlState)): \(message)"
        }
        if let sqlState { return "SQLSTATE \(sqlState): \(message)" }
        if text.contains("Connection refused") || text.contains("errno: \(ECONNREFUSED)") {
            return "the connection was refused: nothing listens at the database's address"
        }
        if text.contains("connectTimeout") || text.range(of: "connect timeout", options: .caseInsensitive) != nil
            || text.contains("errno: \(ETIMEDOUT)")
        {
            return "no answer while connecting, within the client's connectTimeout"
        }
        if text.contains("sslUnsupported") {
            return "TLS: the server does not offer TLS, which the client requires"
        }
        if text.range(of: "ssl", options: .caseInsensitive) != nil || text.contains("TLS") {
            return "TLS failed: \(text.prefix(300))"
        }
        if text.contains("unsupportedAuthMechanism") || text.contains("authMechanismRequiresPassword")
            || text.contains("saslError")
        {
            return "authentication failed: \(text.prefix(300))"
        }
        return String(text.prefix(300))
    }

    private struct Handler: LogHandler {
        var wrapped: any LogHandler
        let failures: ConnectFailures

        var metadata: Logger.Metadata {
            get { wrapped.metadata }
            set { wrapped.metadata = newValue }
        }

        /// Info at least, for the pool's line about a failed attempt; the wrapped handler still
        /// gets only what its own level lets through.
        var logLevel: Logger.Level {
            get { min(wrapped.logLevel, .info) }
            set { wrapped.logLevel = newValue }
        }

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { wrapped[metadataKey: key] }
            set { wrapped[metadataKey: key] = newValue }
        }

        func log(event: LogEvent) {
            // `psql_error`: PostgresNIO's metadata key for an error, with its fields.
            if event.message.description == "Connection creation failed", let error = event.metadata?["psql_error"] {
                failures.record("\(error)")
            }
            guard event.level >= wrapped.logLevel else { return }
            wrapped.log(event: event)
        }
    }
}
#endif
