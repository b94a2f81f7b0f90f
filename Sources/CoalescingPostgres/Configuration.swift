#if Postgres
import Foundation
import PostgresNIO

/// What a ``PostgresCoalescer`` does when it cannot reach the database (it is down, restarting,
/// refuses the connection, or the coalescer's table cannot be used).
///
/// Either way the coalescer logs the first failure once (and once more when the database answers
/// again), counts every such caller in ``PostgresCoalescingStatistics/databaseUnavailable`` and
/// reports ``PostgresCoalescingEvent/databaseUnavailable(key:error:)``; nothing waits for the
/// database to come back.
public enum DatabaseUnavailablePolicy: Sendable, Equatable {
    /// Run the work in this process, coalesced with this process's other callers only, as a
    /// coalescer without a database would. The default: a fleet keeps answering while the database
    /// is away, and its upstream sees one run per process per burst instead of one per fleet.
    case runLocally
    /// Throw ``CoalescingPostgresError/databaseUnavailable(_:)`` to every caller of this process
    /// that waits for the database step.
    case fail
}

/// How a ``PostgresCoalescer`` reaches its database and what it keeps there.
public struct PostgresCoalescerConfiguration: Sendable {
    /// How each database step connects: host, port, user, password, database, TLS.
    public var connection: PostgresConnection.Configuration
    /// The results table, and the namespace of the coalescer's advisory locks: a lower-case SQL
    /// identifier (letters, digits, underscores). Coalescers that must coalesce with each other use
    /// the same table; its sequence is `<table>_seq`.
    public var table: String
    /// Whether the coalescer creates its table and sequence (`CREATE … IF NOT EXISTS`, once per
    /// coalescer) or expects them to exist, created by a migration that runs ``migrationSQL``.
    public var createsTable: Bool
    /// What callers get while the database cannot be reached.
    public var whenDatabaseUnavailable: DatabaseUnavailablePolicy
    /// The largest encoded value published for other processes. A larger value still reaches this
    /// process's callers; the callers in other processes throw
    /// ``CoalescingPostgresError/valueTooLarge(bytes:limit:)``. PostgreSQL's own ceiling for a
    /// `bytea` value is 1 GB; the default, 8 MiB, keeps a result far below it.
    public var maximumValueBytes: Int
    /// How long a published result stays in the table: long enough for the processes that waited
    /// for it to read it (milliseconds). Each publication deletes the rows older than this, of any
    /// key, and each key holds only its latest result: the table is a mailbox, not a cache.
    public var resultRetention: Duration
    /// How long connecting may take before the database counts as unavailable.
    public var connectTimeout: Duration

    /// A configuration with the defaults: table `coalescing_results`, created by the coalescer,
    /// local runs while the database is unavailable, 8 MiB values, 60 s retention, 5 s to connect.
    ///
    /// - Parameter connection: How to connect to PostgreSQL.
    public init(connection: PostgresConnection.Configuration) {
        self.connection = connection
        table = "coalescing_results"
        createsTable = true
        whenDatabaseUnavailable = .runLocally
        maximumValueBytes = 8 << 20
        resultRetention = .seconds(60)
        connectTimeout = .seconds(5)
    }

    /// A configuration from a URL such as `postgres://user:password@127.0.0.1:5432/database`,
    /// without TLS, with the defaults of ``init(connection:)``.
    ///
    /// - Parameter url: A `postgres://` or `postgresql://` URL with a host and a user.
    /// - Throws: ``CoalescingPostgresError/invalidConfiguration(_:)`` for another scheme or a URL
    ///   without host or user.
    public init(url: String) throws {
        guard let components = URLComponents(string: url), ["postgres", "postgresql"].contains(components.scheme),
            let host = components.host, let user = components.user
        else {
            throw CoalescingPostgresError.invalidConfiguration("not a postgres://user@host/database URL")
        }
        let database = components.path.split(separator: "/").first.map(String.init)
        self.init(
            connection: .init(
                host: host, port: components.port ?? 5432, username: user, password: components.password,
                database: database, tls: .disable))
    }

    /// The SQL that creates the table and sequence, for a migration when ``createsTable`` is false.
    /// Every statement is idempotent.
    public var migrationSQL: String {
        """
        CREATE SEQUENCE IF NOT EXISTS \(table)_seq;
        CREATE TABLE IF NOT EXISTS \(table) (
            key text PRIMARY KEY,
            seq bigint NOT NULL,
            started bigint NOT NULL,
            value bytea,
            failure_kind smallint,
            failure text,
            published_at timestamptz NOT NULL DEFAULT now()
        );
        """
    }

    func validated() throws -> Self {
        let valid =
            table.utf8.count <= 50 && table.first.map { $0 == "_" || ("a"..."z").contains($0) } == true
            && table.allSatisfy { $0 == "_" || ("a"..."z").contains($0) || ("0"..."9").contains($0) }
        guard valid else {
            throw CoalescingPostgresError.invalidConfiguration(
                "the table name \(table) is not a lower-case identifier of at most 50 characters")
        }
        guard maximumValueBytes > 0, maximumValueBytes < 1 << 30 else {
            throw CoalescingPostgresError.invalidConfiguration("maximumValueBytes must be between 1 byte and 1 GB")
        }
        return self
    }
}
#endif
