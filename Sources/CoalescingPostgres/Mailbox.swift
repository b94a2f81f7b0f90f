#if Postgres
import Foundation
import Logging
import NIOCore
import PostgresNIO

/// The mailbox table on the pool: a result too large to travel in its notification, written
/// before the session announces it, and the sweep of old rows. Nothing here runs on the session, so
/// that no statement of the session grows with a value.
struct Mailbox {
    let configuration: PostgresCoalescerConfiguration

    /// Writes a result to the table, replacing the key's last one, within
    /// ``PostgresCoalescerConfiguration/connectTimeout``.
    ///
    /// - Returns: The row's sequence value, which the result's notification names.
    func store(_ publication: Publication, client: PostgresClient, logger: Logger) async throws -> Int64 {
        let table = configuration.table
        let key = ByteBuffer(bytes: Array(publication.key.utf8))
        let value = publication.value.map { ByteBuffer(bytes: $0) }
        let failureKind = publication.failureKind == 0 ? nil : publication.failureKind
        let failure = publication.failure.isEmpty ? nil : publication.failure
        return try await Bounded.run(within: configuration.connectTimeout) {
            let rows = try await client.query(
                """
                INSERT INTO \(unescaped: quoted(table)) AS r
                    (key_hash, key, seq, started, value, failure_kind, failure, published_at)
                VALUES (sha256(\(key)), \(key), nextval(\(quoted(table + "_seq"))::regclass), \(publication.started),
                    \(value), \(failureKind), \(failure), now())
                ON CONFLICT (key_hash) DO UPDATE SET key = excluded.key, seq = excluded.seq,
                    started = excluded.started, value = excluded.value, failure_kind = excluded.failure_kind,
                    failure = excluded.failure, published_at = excluded.published_at
                RETURNING seq
                """, logger: logger)
            for try await sequence in rows.decode(Int64.self) { return sequence }
            throw CoalescingPostgresError.databaseError(sqlState: "", message: "the result's row was not written")
        }
    }

    /// Deletes the results older than ``PostgresCoalescerConfiguration/resultRetention``.
    func sweep(client: PostgresClient, logger: Logger) async throws {
        let (seconds, attoseconds) = configuration.resultRetention.components
        let retention = Double(seconds) + Double(attoseconds) / 1e18
        let table = configuration.table
        try await Bounded.run(within: configuration.connectTimeout) {
            try await client.perform(
                """
                DELETE FROM \(unescaped: quoted(table))
                WHERE published_at < now() - make_interval(secs => \(retention))
                """, logger: logger)
        }
    }
}

/// The table and its sequence, created under an advisory lock of their own, since
/// `CREATE … IF NOT EXISTS` races with itself across sessions.
struct Schema {
    let configuration: PostgresCoalescerConfiguration

    func create(on connection: PostgresConnection, logger: Logger) async throws {
        let lock = LockKey(table: configuration.table, key: "coalescing-schema").value
        try await connection.perform("SELECT pg_advisory_lock(\(lock))", logger: logger)
        do {
            for statement in configuration.migrationStatements {
                try await connection.perform(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        } catch {
            try? await connection.perform("SELECT pg_advisory_unlock(\(lock))", logger: logger)
            throw error
        }
        try await connection.perform("SELECT pg_advisory_unlock(\(lock))", logger: logger)
    }

    /// What a readiness check needs to know: each missing piece, named.
    func missing(on client: PostgresClient, logger: Logger) async throws -> [String] {
        let table = quoted(configuration.table)
        let sequence = quoted(configuration.table + "_seq")
        let rows = try await client.query(
            """
            SELECT to_regclass(\(table)) IS NOT NULL, to_regclass(\(sequence)) IS NOT NULL,
                EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass(\(table)) AND attname = 'key_hash'),
                CASE WHEN to_regclass(\(table)) IS NULL THEN false
                    ELSE has_table_privilege(to_regclass(\(table)), 'SELECT, INSERT, UPDATE, DELETE') END,
                CASE WHEN to_regclass(\(sequence)) IS NULL THEN false
                    ELSE has_sequence_privilege(to_regclass(\(sequence)), 'USAGE, UPDATE') END
            """, logger: logger)
        var missing: [String] = []
        for try await (hasTable, hasSequence, hasColumns, tableGranted, sequenceGranted) in rows.decode(
            (Bool, Bool, Bool, Bool, Bool).self)
        {
            if !hasTable { missing.append("the table \(table)") }
            if !hasSequence { missing.append("the sequence \(sequence)") }
            if hasTable, !hasColumns {
                missing.append(
                    "the column key_hash of \(table): a table of the first design; drop it and migrate again")
            }
            if hasTable, !tableGranted { missing.append("SELECT, INSERT, UPDATE, DELETE on \(table)") }
            if hasSequence, !sequenceGranted { missing.append("USAGE, UPDATE on the sequence \(sequence)") }
        }
        return missing
    }
}

extension PostgresConnection {
    /// Runs a statement whose rows, if any, do not matter, and waits for its end.
    func perform(_ query: PostgresQuery, logger: Logger) async throws {
        _ = try await rows(query, logger: logger)
    }

    /// A statement's rows, all of them, written from the connection's event loop and only while
    /// its channel is open. PostgresNIO drops what is written to a channel that has closed (its
    /// pipeline has lost the handler): the answer of a statement written then never comes. The
    /// pool closes the session's connection when the client's `run()` is cancelled, at any point
    /// of the session's life. On the event loop, an open channel stays open until the write has
    /// reached the handler, which fails what is in flight when the channel closes.
    func rows(_ query: PostgresQuery, logger: Logger) async throws -> [PostgresRow] {
        try await eventLoop.flatSubmit {
            guard !self.isClosed else {
                return self.eventLoop.makeFailedFuture(
                    CoalescingPostgresError.databaseUnavailable("the session's connection closed"))
            }
            return self.query(query, logger: logger).map(\.rows)
        }.get()
    }

    /// Adds a listener as ``rows(_:logger:)`` writes a statement; throws if the channel has
    /// closed, where the listener would be dropped, and trap ("Notification closure had not been
    /// used").
    func addListenerWhileOpen(
        channel: String,
        handler: @Sendable @escaping (PostgresListenContext, PostgresMessage.NotificationResponse) -> Void
    ) async throws -> PostgresListenContext {
        try await eventLoop.submit {
            guard !self.isClosed else {
                throw CoalescingPostgresError.databaseUnavailable("the session's connection closed")
            }
            return self.addListener(channel: channel, handler: handler)
        }.get()
    }
}

extension PostgresClient {
    /// Runs a statement on a pooled connection, rows ignored.
    func perform(_ query: PostgresQuery, logger: Logger) async throws {
        _ = try await self.query(query, logger: logger).collect()
    }
}
#endif
