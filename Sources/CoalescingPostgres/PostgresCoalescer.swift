#if Postgres
import CoalescingOperations
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import ServiceLifecycle

/// Runs identical work once across every process that shares a PostgreSQL database, and hands its
/// result to every caller in every process.
///
/// ```swift
/// import CoalescingPostgres
///
/// struct Profile: Codable, Sendable {
///     var name: String
/// }
///
/// func fetchProfile(id: String) async throws -> Profile {
///     Profile(name: id)  // the upstream the fleet protects
/// }
///
/// func serve() async throws {
///     let profiles = try PostgresCoalescer<Profile>(url: "postgres://app@127.0.0.1:5432/app")
///     async let running: Void = profiles.run()
///     let profile = try await profiles.value(key: "profile:42", timeout: .seconds(5)) {
///         try await fetchProfile(id: "42")
///     }
///     print(profile.name)
///     try await running
/// }
/// ```
///
/// The coalescer is a `Service` of swift-service-lifecycle: ``run()`` keeps its session, and its
/// client when it made one, until a graceful shutdown, which lets the work this process runs finish
/// and publish first. Add it to the app's `ServiceGroup`, beside the app's `PostgresClient` when it
/// runs on that one (``init(client:configuration:logger:observer:clock:)``).
///
/// Callers in one process join an ``InFlightTaskCoalescer`` first, so a process holds at most one
/// database step per key; the steps of every key share one session connection, which listens for
/// results and holds the advisory locks, and the pool reads and publishes. See the article
/// "Coalescing across processes" for the design, the table, the permissions and what to monitor,
/// and Guarantees 28 to 35 for the contract.
///
/// - Per-caller timeouts and withdrawal work as in the in-process coalescer: only that caller gives
///   up. When the last caller of this process has gone, `whenAbandoned` decides whether this
///   process's step is dropped (or its work cancelled, and another process takes over) or runs to
///   its end.
/// - ``cancel(key:)`` and ``cancelAll()`` act on this process only. After ``forget(key:)``, the
///   callers this process registers need a run that started after it, in any process.
/// - The value crosses processes as JSON in a `bytea` column, up to
///   ``PostgresCoalescerConfiguration/maximumValueBytes``.
public final class PostgresCoalescer<Value: Codable & Sendable>: Service, Sendable {
    private let configuration: PostgresCoalescerConfiguration
    private let local: InFlightTaskCoalescer<LocalKey, Value>
    private let session: Session
    private let step: DatabaseStep
    private let recorder: StepRecorder
    private let client: PostgresClient
    private let ownsClient: Bool
    /// How many times each key was forgotten since a run that started after its last forget
    /// served it: callers registered meanwhile share no work with those registered before.
    private let forgotten = NIOLockedValueBox([String: Int]())

    /// Creates a coalescer on the app's own `PostgresClient`, which the app runs.
    ///
    /// The coalescer leases one of the client's connections for as long as ``run()`` runs (its
    /// session: notifications and advisory locks), and borrows others briefly to read and publish
    /// results. That connection must reach PostgreSQL directly or through PgBouncer in session
    /// mode; see the article "Coalescing across processes".
    ///
    /// - Parameters:
    ///   - client: The app's client.
    ///   - configuration: The table, the policy while the database is unreachable, the limits.
    ///   - logger: Logs an outage (once) and its end, results that could not be published, lost
    ///     locks and database errors.
    ///   - observer: Receives every ``PostgresCoalescingEvent``, on the thread that made the step,
    ///     the in-process coalescer's events included as ``PostgresCoalescingEvent/local(_:)``.
    ///   - clock: The clock the coalescer's time runs on: callers' timeouts, the session's
    ///     deadlines, keep-alives and take-over checks. The default, the continuous clock, is the
    ///     wall's.
    /// - Throws: ``CoalescingPostgresError/invalidConfiguration(_:)`` for a table name PostgreSQL
    ///   cannot take, a maximum value size out of range or a duration that is not positive.
    public convenience init<C: Clock>(
        client: PostgresClient,
        configuration: PostgresCoalescerConfiguration = PostgresCoalescerConfiguration(),
        logger: Logger = Logger(label: "CoalescingPostgres"),
        observer: (@Sendable (PostgresCoalescingEvent) -> Void)? = nil,
        clock: C = ContinuousClock()
    ) throws where C.Duration == Duration {
        try self.init(client: client, owned: false, configuration, logger, observer, clock)
    }

    /// Creates a coalescer with a client of its own, from a URL such as a `DATABASE_URL`
    /// (`postgres://user:password@host:5432/database?sslmode=require`): the short way.
    /// ``run()`` runs that client too, and stops it last.
    ///
    /// - Parameters:
    ///   - url: A `postgres://` or `postgresql://` URL; see
    ///     `PostgresClient.Configuration.init(coalescingURL:)` for TLS.
    ///   - maximumConnections: The most connections this process opens, the session included; at
    ///     least 2.
    ///   - configuration: The table, the policy while the database is unreachable, the limits.
    ///   - logger: As for ``init(client:configuration:logger:observer:clock:)``, and the client's own.
    ///   - observer: As for ``init(client:configuration:logger:observer:clock:)``.
    ///   - clock: As for ``init(client:configuration:logger:observer:clock:)``.
    /// - Throws: ``CoalescingPostgresError/invalidConfiguration(_:)`` for a URL it cannot use,
    ///   fewer than 2 connections, or a configuration as above.
    public convenience init<C: Clock>(
        url: String,
        maximumConnections: Int = 4,
        configuration: PostgresCoalescerConfiguration = PostgresCoalescerConfiguration(),
        logger: Logger = Logger(label: "CoalescingPostgres"),
        observer: (@Sendable (PostgresCoalescingEvent) -> Void)? = nil,
        clock: C = ContinuousClock()
    ) throws where C.Duration == Duration {
        guard maximumConnections >= 2 else {
            throw CoalescingPostgresError.invalidConfiguration(
                "maximumConnections must be at least 2: the session and one more")
        }
        var clientConfiguration = try PostgresClient.Configuration(coalescingURL: url)
        clientConfiguration.options.maximumConnections = maximumConnections
        clientConfiguration.options.connectTimeout = configuration.connectTimeout
        // The pool keeps why it cannot connect to its log: the session's outage says it too.
        let failures = ConnectFailures()
        let client = PostgresClient(
            configuration: clientConfiguration, backgroundLogger: failures.logger(wrapping: logger))
        try self.init(client: client, owned: true, configuration, logger, observer, clock)
        recorder.watch(failures)
    }

    private init<C: Clock>(
        client: PostgresClient, owned: Bool, _ configuration: PostgresCoalescerConfiguration, _ logger: Logger,
        _ observer: (@Sendable (PostgresCoalescingEvent) -> Void)?, _ clock: C
    ) throws where C.Duration == Duration {
        self.configuration = try configuration.validated()
        self.client = client
        ownsClient = owned
        recorder = StepRecorder(logger: logger, observer: observer)
        session = Session(configuration: self.configuration, recorder: recorder, clock: SessionClock(clock))
        step = DatabaseStep(configuration: self.configuration, session: session, client: client, recorder: recorder)
        let localObserver: (@Sendable (CoalescingEvent<LocalKey>) -> Void)? =
            if let observer { { observer(.local($0.map(\.key))) } } else { nil }
        local = InFlightTaskCoalescer(observer: localObserver, clock: clock)
    }

    /// Keeps the coalescer's session (and its client, when it made one) until the task is
    /// cancelled or a graceful shutdown begins. On a graceful shutdown, new steps stop using the
    /// database (``PostgresCoalescerConfiguration/whenDatabaseUnavailable`` decides for them),
    /// steps waiting for another process end the same way, and the work this process runs finishes
    /// and publishes its result before the session closes; work given up on the way is taken over
    /// by another process. Call it once.
    public func run() async throws {
        // Detached, so that a graceful shutdown does not stop the client before the session has
        // drained; started before the session leases from it, which PostgresNIO warns about.
        var clientRun: Task<Void, Never>?
        if ownsClient {
            await withCheckedContinuation { started in
                clientRun = Task.detached { [client] in
                    started.resume()
                    await client.run()
                }
            }
            await Task.yield()
        }
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await session.run(client: client)
            } onGracefulShutdown: { [session] in
                session.stop(draining: true)
            }
        } onCancel: { [session] in
            session.stop(draining: false)
        }
        clientRun?.cancel()
        await clientRun?.value
    }

    /// Returns the result of the work for `key` in flight in any process sharing the database, or
    /// runs `operation` here if there is none.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work, in every process: any string, of any length
    ///     and content, that names it.
    ///   - timeout: How long this caller waits at most; when it passes, this caller alone throws
    ///     `CoalescingError.timedOut`.
    ///   - whenAbandoned: What happens to this process's step when its last caller withdraws, for
    ///     the caller that starts it.
    ///   - operation: The work, run in this process if it takes the key's lock.
    /// - Returns: The work's value, the same for every caller in every process.
    /// - Throws: The work's error, when it ran here; ``CoalescingPostgresError`` for what another
    ///   process reported, a database error, or the database's absence under
    ///   ``DatabaseUnavailablePolicy/fail``; `CancellationError` or `CoalescingError` as the
    ///   in-process coalescer throws them.
    public func value(
        key: String,
        timeout: Duration? = nil,
        whenAbandoned: AbandonedWorkPolicy = .cancel,
        operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let forgets = forgotten.withLockedValue { $0[key] ?? 0 }
        return try await local.value(
            key: LocalKey(key: key, forgets: forgets), name: "coalescing-postgres \(key.prefix(64))", timeout: timeout,
            whenAbandoned: whenAbandoned
        ) { [step, forgotten] in
            let value = try await step.run(key: key, freshOnly: forgets > 0, operation: operation)
            // A run that started after the forget served these callers; runs of a key never overlap,
            // so every later one starts after it too.
            if forgets > 0 { forgotten.withLockedValue { if $0[key] == forgets { $0[key] = nil } } }
            return value
        }
    }

    /// Cancels this process's step for `key`: its callers throw `CoalescingError.cancelled`. Local:
    /// if this process ran the work, another process waiting for the key takes over and runs it.
    ///
    /// - Parameter key: The key whose step to cancel.
    /// - Returns: Whether a step was in flight here for `key`.
    @discardableResult public func cancel(key: String) -> Bool {
        local.cancel(key: LocalKey(key: key, forgets: forgotten.withLockedValue { $0[key] ?? 0 }))
    }

    /// Cancels every step of this process; other processes are not told.
    ///
    /// - Returns: Whether any step was in flight here.
    @discardableResult public func cancelAll() -> Bool {
        local.cancelAll()
    }

    /// Makes the callers of `key` that this process registers from now on need a run that started
    /// after this call, in any process: use it after a write. Callers registered before keep the
    /// step they have; the two never share one.
    ///
    /// - Parameter key: The key to forget.
    /// - Returns: Whether a step was in flight here for `key`.
    @discardableResult public func forget(key: String) -> Bool {
        let before = forgotten.withLockedValue { forgotten in
            defer { forgotten[key, default: 0] += 1 }
            return forgotten[key] ?? 0
        }
        return local.forget(key: LocalKey(key: key, forgets: before))
    }

    /// Checks that the table, its sequence and the privileges on them are there, creating them
    /// first when ``PostgresCoalescerConfiguration/createsTable`` is true: a readiness check, so
    /// that a deploy whose migration did not run fails to start instead of failing every request.
    /// Without the table, every step that reaches the database throws
    /// ``CoalescingPostgresError/databaseError(sqlState:message:)`` with SQLSTATE `42P01` to its
    /// callers (an error, not an outage: nothing runs locally in its place).
    ///
    /// It reads through the client, so the client must be running: call it once the service group
    /// that runs the client runs, from a service of that group or from Hummingbird's
    /// `beforeServerStarts`, never before `run()`. Before that, nothing answers it, and it throws
    /// ``CoalescingPostgresError/databaseUnavailable(_:)`` after
    /// ``PostgresCoalescerConfiguration/connectTimeout``.
    ///
    /// - Throws: ``CoalescingPostgresError/schemaNotReady(_:)`` naming each missing piece, or, with
    ///   ``PostgresCoalescerConfiguration/createsTable`` and a role that may not create them
    ///   (SQLSTATE `42501`), naming that privilege and what to do instead; another
    ///   ``CoalescingPostgresError`` when the database cannot be asked.
    public func checkSchema() async throws {
        let schema = Schema(configuration: configuration)
        let missing: [String]
        do {
            missing = try await Bounded.run(within: configuration.connectTimeout) { [client, recorder, configuration] in
                if configuration.createsTable {
                    do {
                        try await client.withConnection { try await schema.create(on: $0, logger: recorder.logger) }
                    } catch let error as PSQLError where error.serverInfo?[.sqlState] == "42501" {
                        throw CoalescingPostgresError.schemaNotReady([
                            "the privilege to create \(quoted(configuration.table)) and its sequence "
                                + "(SQLSTATE 42501: \(error.serverInfo?[.message] ?? "permission denied")): run "
                                + "migrationStatements as a role that may create them, grantStatements(to:) for this "
                                + "role, and set createsTable = false"
                        ])
                    }
                }
                return try await schema.missing(on: client, logger: recorder.logger)
            }
        } catch let error as CancellationError {
            throw error
        } catch CoalescingPostgresError.databaseUnavailable(let message) where !session.isReady {
            // The usual cause before a deploy's first request: the client does not run yet.
            throw CoalescingPostgresError.databaseUnavailable(
                "\(message), and the session is not up either: the database refuses or does not answer, or "
                    + "the client does not run yet (checkSchema() needs the service group running)")
        } catch {
            throw CoalescingPostgresError(error)
        }
        guard missing.isEmpty else { throw CoalescingPostgresError.schemaNotReady(missing) }
    }

    /// Whether this process's session is up: connected to the database, listening on the table's
    /// channel, and its own notification heard. A readiness probe's answer, read without I/O (one
    /// lock): false before ``run()`` has connected, while the session reconnects after a loss or
    /// the database is out of reach, and after a shutdown. Meanwhile steps follow
    /// ``PostgresCoalescerConfiguration/whenDatabaseUnavailable`` once
    /// ``PostgresCoalescerConfiguration/connectTimeout`` has passed; so keep it out of a liveness
    /// probe, or a database outage restarts every instance of the fleet.
    public var isSessionReady: Bool {
        session.isReady
    }

    /// What this process's coalescer has done, across processes and within this one.
    public var statistics: PostgresCoalescingStatistics {
        var statistics = recorder.snapshot
        statistics.local = local.statistics
        return statistics
    }
}

/// The in-process coalescer's key: callers registered after a forget never share a step with
/// those registered before it.
struct LocalKey: Hashable, Sendable {
    var key: String
    var forgets: Int
}
#else
/// Whether this build has the `Postgres` trait: false here. Enable it to get `PostgresCoalescer`:
/// `.package(url: …, from: …, traits: ["Postgres"])`, or `swift build --traits Postgres`.
public let coalescingPostgresIsAvailable = false
#endif
