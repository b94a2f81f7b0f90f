#if Postgres
import Foundation
import PostgresNIO

/// What a ``PostgresCoalescer`` does when it cannot reach the database: the connection is refused,
/// the server is restarting or shutting down, or nothing answers within
/// ``PostgresCoalescerConfiguration/connectTimeout``.
///
/// Only unreachability counts: any other database error (a missing table, a privilege, a bad
/// statement) reaches the callers as ``CoalescingPostgresError/databaseError(sqlState:message:)``.
/// Either way the coalescer logs the first failure of an outage once (and once more when the
/// database answers again), counts every such step in
/// ``PostgresCoalescingStatistics/databaseUnavailable`` and reports
/// ``PostgresCoalescingEvent/databaseUnavailable(key:error:)``; nothing waits for the database to
/// come back.
public enum DatabaseUnavailablePolicy: Sendable, Equatable {
    /// Run the work in this process, coalesced with this process's other callers only, as a
    /// coalescer without a database would. The default: a fleet keeps answering while the database
    /// is away, and its upstream sees one run per process per burst instead of one per fleet.
    case runLocally
    /// Throw ``CoalescingPostgresError/databaseUnavailable(_:)`` to every caller of this process
    /// whose step needed the database.
    case fail
}

/// What a ``PostgresCoalescer`` keeps in the database, and how long it waits for it.
///
/// How the coalescer connects is not here: it uses a `PostgresClient`, the app's own or one it
/// creates from a URL (``PostgresCoalescer/init(url:maximumConnections:configuration:logger:observer:clock:)``).
public struct PostgresCoalescerConfiguration: Sendable {
    /// The mailbox table, whose name also names its sequence (`<table>_seq`) and the notification
    /// channel. Any name PostgreSQL accepts as an identifier of at most 59 bytes, without a double
    /// quote: the coalescer always writes it quoted, so `order` or `Fleet Results` work as they
    /// are, case included. Coalescers that must coalesce with each other use the same table.
    public var table: String
    /// Whether the coalescer creates its table and sequence when its session starts
    /// (`CREATE … IF NOT EXISTS`, serialised across processes), or expects a migration to have run
    /// ``migrationStatements``. Either way, ``PostgresCoalescer/checkSchema()`` tells a readiness
    /// check what is missing.
    public var createsTable: Bool
    /// What callers get while the database cannot be reached.
    public var whenDatabaseUnavailable: DatabaseUnavailablePolicy
    /// The largest encoded value published for other processes. A larger value still reaches this
    /// process's callers; the callers in other processes throw
    /// ``CoalescingPostgresError/valueTooLarge(bytes:limit:)``. PostgreSQL's own ceiling for a
    /// `bytea` value is 1 GB; the default, 8 MiB, keeps a result far below it.
    public var maximumValueBytes: Int
    /// How long a published result stays in the table, for the processes that were waiting for
    /// it: the coalescer sweeps older rows once per this duration. Each key holds only its latest
    /// result: the table is a mailbox, not a cache.
    public var resultRetention: Duration
    /// How long a step waits for a session (and for a pooled connection or its answer) before the
    /// database counts as unavailable and the step follows ``whenDatabaseUnavailable``; with the
    /// URL initialiser, also the client's own connect timeout. A session that is lost is replaced
    /// meanwhile: only one that cannot be had within this is an outage.
    ///
    /// It decides what a caller meets in an outage: once the session is gone (the database
    /// refuses, restarts, or closed it), a step follows the policy within this, so a caller whose
    /// `timeout:` exceeds twice this plus the work's own time never times out because the
    /// database went away: under ``DatabaseUnavailablePolicy/runLocally`` it gets its value, run in
    /// its process. A network gone silent is noticed after ``silentSessionTimeout`` first. The
    /// default, 1 s, fits a database on the fleet's network, where a connection opens in
    /// milliseconds, and callers with a timeout of 3 s and more; raise it for a database far away,
    /// and the callers' timeouts with it.
    public var connectTimeout: Duration
    /// How often a step that waits for another process's run asks for the key's lock again, so
    /// that it takes over from a leader that died or was cut off without a word (Guarantee 30). A
    /// leader that ends or gives up says so at once; this bounds only the silent case. A leader
    /// whose process is stopped (not dead) keeps its lock with its session: it is not taken over.
    public var takeOverInterval: Duration
    /// How often the session connection proves it is alive, when it has nothing else to say: a
    /// statement every this often keeps proxies and NAT from closing it, and lets
    /// ``silentSessionTimeout`` see a network gone silent.
    public var keepAliveInterval: Duration
    /// How long a statement of the session may go unanswered before the session is closed and
    /// counts as lost, with every lock it held; its steps then wait for the next session. Until
    /// then a statement is slow, not lost: a stall of the database's backend, of another process
    /// that holds up the commits of notifications, or of a busy machine is waited out. A lock
    /// request waits at most this plus ``connectTimeout`` for its answer, across sessions.
    public var silentSessionTimeout: Duration

    /// A configuration with the defaults: table `coalescing_mailbox`, created by the coalescer,
    /// local runs while the database is unavailable, 8 MiB values, 60 s retention, 1 s to reach
    /// the database, take-over checks every 500 ms, a keep-alive every 500 ms, and 5 s before a
    /// silent session counts as lost.
    public init() {
        table = "coalescing_mailbox"
        createsTable = true
        whenDatabaseUnavailable = .runLocally
        maximumValueBytes = 8 << 20
        resultRetention = .seconds(60)
        connectTimeout = .seconds(1)
        takeOverInterval = .milliseconds(500)
        keepAliveInterval = .milliseconds(500)
        silentSessionTimeout = .seconds(5)
    }

    /// The statements that create the table and its sequence, for a migration tool that runs them
    /// one at a time, when ``createsTable`` is false. Each is idempotent. The table is `UNLOGGED`:
    /// it holds results for a few seconds, so a crash that empties it costs nothing, and no result
    /// goes through the write-ahead log or replication.
    public var migrationStatements: [String] {
        [
            "CREATE SEQUENCE IF NOT EXISTS \(quoted(table + "_seq"))",
            """
            CREATE UNLOGGED TABLE IF NOT EXISTS \(quoted(table)) (
                key_hash bytea PRIMARY KEY,
                key bytea NOT NULL,
                seq bigint NOT NULL,
                started bigint NOT NULL,
                value bytea,
                failure_kind smallint,
                failure text,
                published_at timestamptz NOT NULL DEFAULT now()
            )
            """,
        ]
    }

    /// The statements that give `role` what the coalescer needs, for the same migration.
    /// Advisory locks and notifications need no privilege.
    ///
    /// - Parameter role: The role the app connects as; quoted, so any name works.
    /// - Returns: A `GRANT` on the table and one on its sequence.
    public func grantStatements(to role: String) -> [String] {
        [
            "GRANT SELECT, INSERT, UPDATE, DELETE ON \(quoted(table)) TO \(quoted(role))",
            "GRANT USAGE, UPDATE ON SEQUENCE \(quoted(table + "_seq")) TO \(quoted(role))",
        ]
    }

    /// Refuses what PostgreSQL would refuse later, so that a bad name fails at once, not at every step.
    func validated() throws -> Self {
        // NAMEDATALEN is 64: 63 bytes for the sequence's name, `_seq` included.
        guard !table.isEmpty, table.utf8.count <= 59, !table.contains("\""), !table.contains("\u{0}") else {
            throw CoalescingPostgresError.invalidConfiguration(
                "the table name \(table.debugDescription) must be 1 to 59 bytes, without a double quote or NUL")
        }
        guard maximumValueBytes > 0, maximumValueBytes < 1 << 30 else {
            throw CoalescingPostgresError.invalidConfiguration("maximumValueBytes must be between 1 byte and 1 GB")
        }
        let durations = [connectTimeout, takeOverInterval, keepAliveInterval, silentSessionTimeout, resultRetention]
        guard durations.allSatisfy({ $0 > .zero }) else {
            throw CoalescingPostgresError.invalidConfiguration(
                "connectTimeout, takeOverInterval, keepAliveInterval, silentSessionTimeout and resultRetention must be "
                    + "positive")
        }
        return self
    }
}

/// An identifier as SQL writes it whatever it holds: in double quotes, with each quote doubled.
func quoted(_ identifier: String) -> String {
    "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

extension PostgresClient.Configuration {
    /// A client configuration from a URL such as `postgres://user:password@host:5432/database`,
    /// the form of a `DATABASE_URL`. `sslmode=require` (or `verify-full`) requires TLS with the
    /// system's trust roots and the host's name checked, `sslmode=prefer` uses it when the server
    /// offers it; without `sslmode`, or with `disable`, the connection is plain. `application_name`
    /// names the connections in `pg_stat_activity`.
    ///
    /// - Parameter url: A `postgres://` or `postgresql://` URL with a host and a user.
    /// - Throws: ``CoalescingPostgresError/invalidConfiguration(_:)`` for another scheme, a URL
    ///   without host or user, or an `sslmode` it does not know.
    public init(coalescingURL url: String) throws {
        guard let components = URLComponents(string: url), ["postgres", "postgresql"].contains(components.scheme),
            let host = components.host, let user = components.user
        else {
            throw CoalescingPostgresError.invalidConfiguration("not a postgres://user@host/database URL")
        }
        let tls: TLS
        switch components.queryItems?.first(where: { $0.name == "sslmode" })?.value {
        case nil, "disable": tls = .disable
        case "prefer", "allow": tls = .prefer(.makeClientConfiguration())
        case "require", "verify-ca", "verify-full": tls = .require(.makeClientConfiguration())
        case let mode?:
            throw CoalescingPostgresError.invalidConfiguration("sslmode \(mode) is not one of disable, prefer, require")
        }
        let database = components.path.split(separator: "/").first.map(String.init)
        self.init(
            host: host, port: components.port ?? 5432, username: user.removingPercentEncoding ?? user,
            password: components.password?.removingPercentEncoding, database: database, tls: tls)
        if let name = components.queryItems?.first(where: { $0.name == "application_name" })?.value {
            options.additionalStartupParameters.append(("application_name", name))
        }
    }
}
#endif
