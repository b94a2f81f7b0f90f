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

/// What the table's channel carries, written and read here only. A result is
/// `<lock> <sequence> <started>`, then ` <key in hex> <value as JSON>` when the value travels in
/// it; a release is `<lock> released <how>`.
enum ChannelMessage: Hashable {
    case result(lock: Int64, sequence: Int64, started: Int64, inline: Heard.Inline?)
    case released(lock: Int64, published: Bool)
    case other

    init(_ payload: String) {
        self = .other
        let words = payload.split(separator: " ", maxSplits: 4, omittingEmptySubsequences: false)
        guard words.count >= 3, let lock = Int64(words[0]) else { return }
        if words[1] == "released" {
            self = .released(lock: lock, published: words[2] == Release.published.rawValue)
        } else if let sequence = Int64(words[1]), let started = Int64(words[2]) {
            let inline = words.count == 5 ? Heard.Inline(key: words[3], json: words[4]) : nil
            self = .result(lock: lock, sequence: sequence, started: started, inline: inline)
        }
    }

    /// A publication's announcement. A result in the table is numbered by its row; one that
    /// travels, by its run's start, which orders it after every earlier result of its lock as
    /// well, since the runs of a lock never overlap and a run starts after the last one's row was
    /// written.
    static func announcing(_ publication: Publication) -> String {
        let sequence = publication.sequence == 0 ? publication.started : publication.sequence
        return "\(publication.lock) \(sequence) \(publication.started)\(publication.inline)"
    }

    /// A release's announcement.
    static func releasing(_ lock: Int64, _ release: Release) -> String {
        "\(lock) released \(release.rawValue)"
    }

    /// A key's bytes in hex: how a notification names the key of the value it carries.
    static func hex(_ key: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(key.utf8.count * 2)
        for byte in key.utf8 {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A key's advisory lock: 64 bits of FNV-1a over the table's name and the key's bytes, computed
/// here so that keys of any content (NUL included) and any length hash alike in every process.
/// Keys whose locks collide only take turns; results are matched by the full key.
struct LockKey {
    let value: Int64

    init(table: String, key: String) {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in table.utf8 + [0xFF] + key.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
        }
        value = Int64(bitPattern: hash)
    }

    /// A lock's watch: the shared advisory lock, in PostgreSQL's space of two-`int4` keys (apart
    /// from the one-`bigint` keys of the locks), that the sessions whose steps wait for the lock
    /// hold. See ``SessionStateMachine``.
    static func watch(_ lock: Int64) -> (Int32, Int32) {
        (Int32(truncatingIfNeeded: lock >> 32), Int32(truncatingIfNeeded: lock))
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
