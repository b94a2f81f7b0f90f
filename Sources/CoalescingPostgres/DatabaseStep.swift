#if Postgres
import CoalescingOperations
import Foundation
import Logging
import NIOCore
import PostgresNIO

/// The cross-process half of a ``PostgresCoalescer``: one run per process and key, on a connection
/// of its own, so that the connection's end (a process killed, a dropped socket) releases the
/// session advisory lock and lets a waiting process take over.
///
/// The protocol, all of it PostgreSQL's own:
/// 1. `nextval` of the table's sequence marks the step's arrival.
/// 2. `pg_advisory_lock(hashtext(table), hashtext(key))` queues behind the process that runs the
///    work for the key (or for another key with the same hash: that only serialises them).
/// 3. With the lock, a row for the full key text published after the arrival is this burst's
///    result: the step returns it. Otherwise the step runs the work and upserts the result.
/// 4. Closing the connection releases the lock: the next waiter reads the result.
struct DatabaseStep: Sendable {
    let configuration: PostgresCoalescerConfiguration
    let recorder: StepRecorder

    /// The result for `key`: read from another process's publication, or from running `operation`.
    ///
    /// - Parameters:
    ///   - key: The full key.
    ///   - freshOnly: Accept only a run that started after this step arrived, for the first step
    ///     after ``PostgresCoalescer/forget(key:)``.
    ///   - operation: The work, run here if this step takes the lock and finds no result.
    /// - Returns: The value, from here or from another process.
    /// - Throws: The work's error, a ``CoalescingPostgresError``, or `CancellationError`.
    func run<Value: Codable & Sendable>(
        key: String, freshOnly: Bool, operation: @Sendable () async throws -> Value
    ) async throws -> Value {
        let connection: PostgresConnection
        do {
            connection = try await connect()
        } catch {
            try Task.checkCancellation()
            return try await unavailable(key: key, error: error, operation: operation)
        }
        // A step given up by its last local caller ends its wait for the lock by closing its connection.
        let outcome: Result<Value, any Error>
        do {
            outcome = .success(
                try await withTaskCancellationHandler {
                    try await run(key: key, freshOnly: freshOnly, on: connection, operation: operation)
                } onCancel: {
                    connection.close().whenComplete { _ in }
                })
        } catch {
            outcome = .failure(error)
        }
        // PostgresNIO requires a connection closed before it goes; closing also releases the lock.
        await connection.closeIfOpen()
        return try outcome.get()
    }

    private func run<Value: Codable & Sendable>(
        key: String, freshOnly: Bool, on connection: PostgresConnection, operation: @Sendable () async throws -> Value
    ) async throws -> Value {
        let arrived = ContinuousClock.now
        let lead: Int64
        let published: Published?
        do {
            let arrival = try await sequenceValue(on: connection)
            let tookLock = try await lock(key: key, on: connection)
            recorder.databaseAnswered()
            published = try await publishedResult(key: key, after: arrival, freshOnly: freshOnly, on: connection)
            lead = published == nil ? try await sequenceValue(on: connection) : 0
            if published == nil {
                recorder.record(.ranHere(key: key, tookOver: !tookLock)) {
                    $0.runsHere += 1
                    if !tookLock { $0.takeOvers += 1 }
                }
            }
        } catch {
            try Task.checkCancellation()
            return try await unavailable(key: key, error: error, operation: operation)
        }
        // Outside the `do` above: another process's failure is the callers' answer, not the database's.
        if let published { return try served(published, key: key, waitedSince: arrived, as: Value.self) }
        let result: Result<Value, any Error>
        do {
            result = .success(try await operation())
        } catch {
            result = .failure(error)
        }
        await publish(result, key: key, started: lead, on: connection)
        return try result.get()
    }

    private func connect() async throws -> PostgresConnection {
        var connectionConfiguration = configuration.connection
        let (seconds, attoseconds) = configuration.connectTimeout.components
        connectionConfiguration.options.connectTimeout = .nanoseconds(
            seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        let connection = try await PostgresConnection.connect(
            configuration: connectionConfiguration, id: recorder.nextConnectionID(), logger: recorder.logger)
        do {
            if configuration.createsTable, !recorder.isSchemaReady {
                try await Schema(configuration: configuration).create(on: connection, logger: recorder.logger)
                recorder.markSchemaReady()
            }
            return connection
        } catch {
            await connection.closeIfOpen()
            throw error
        }
    }

    private func sequenceValue(on connection: PostgresConnection) async throws -> Int64 {
        let rows = try await connection.query(
            "SELECT nextval(\(configuration.table + "_seq"))", logger: recorder.logger)
        for try await value in rows.decode(Int64.self) { return value }
        throw CoalescingPostgresError.invalidConfiguration("nextval returned no row")
    }

    /// Takes the key's lock, waiting if another process holds it; returns whether it was free.
    private func lock(key: String, on connection: PostgresConnection) async throws -> Bool {
        let table = configuration.table
        let rows = try await connection.query(
            "SELECT pg_try_advisory_lock(hashtext(\(table)), hashtext(\(key)))", logger: recorder.logger)
        var free = false
        for try await value in rows.decode(Bool.self) { free = value }
        if !free {
            try await connection.perform(
                "SELECT pg_advisory_lock(hashtext(\(table)), hashtext(\(key)))", logger: recorder.logger)
        }
        return free
    }

    private struct Published {
        var value: Data?
        var failureKind: Int16?
        var failure: String?
    }

    private func publishedResult(
        key: String, after arrival: Int64, freshOnly: Bool, on connection: PostgresConnection
    ) async throws -> Published? {
        let rows = try await connection.query(
            """
            SELECT value, failure_kind, failure FROM \(unescaped: configuration.table)
            WHERE key = \(key) AND seq > \(arrival) AND (started > \(arrival) OR NOT \(freshOnly))
            """, logger: recorder.logger)
        for try await (value, failureKind, failure) in rows.decode((Data?, Int16?, String?).self) {
            return Published(value: value, failureKind: failureKind, failure: failure)
        }
        return nil
    }

    private func served<Value: Decodable>(
        _ published: Published, key: String, waitedSince arrived: ContinuousClock.Instant, as: Value.Type
    ) throws -> Value {
        let failure: CoalescingPostgresError
        switch (published.value, published.failureKind) {
        case (let data?, _):
            do {
                let value = try JSONDecoder().decode(Value.self, from: data)
                recorder.record(.servedFromAnotherProcess(key: key, waited: .now - arrived)) {
                    $0.servedFromAnotherProcess += 1
                }
                return value
            } catch {
                failure = .undecodableValue(String(describing: error))
            }
        case (nil, FailureKind.tooLarge):
            failure = .valueTooLarge(bytes: Int(published.failure ?? "") ?? 0, limit: configuration.maximumValueBytes)
        case (nil, _):
            failure = .failedInAnotherProcess(published.failure ?? "unknown error")
        }
        recorder.record(.failedInAnotherProcess(key: key, error: failure)) { $0.failuresFromAnotherProcess += 1 }
        throw failure
    }

    private enum FailureKind {
        static let threw: Int16 = 1
        static let tooLarge: Int16 = 2
    }

    /// Publishes what the work produced, for the processes waiting on the lock; cancelled work
    /// publishes nothing, so that a waiting process runs it. A failure to publish never reaches this
    /// process's callers: they have their result.
    private func publish<Value: Encodable>(
        _ result: Result<Value, any Error>, key: String, started: Int64, on connection: PostgresConnection
    ) async {
        var value: Data?
        var failure: (kind: Int16, message: String)?
        switch result {
        case .success(let produced):
            do {
                let data = try JSONEncoder().encode(produced)
                if data.count > configuration.maximumValueBytes {
                    failure = (FailureKind.tooLarge, String(data.count))
                    recorder.record(.publishFailed(key: key, error: "the value takes \(data.count) bytes")) {
                        $0.valuesTooLarge += 1
                    }
                } else {
                    value = data
                }
            } catch {
                failure = (FailureKind.threw, "the value did not encode: \(error)")
            }
        case .failure(let error) where error is CancellationError || Task.isCancelled:
            return
        case .failure(let error):
            failure = (FailureKind.threw, String(describing: error))
        }
        let table = configuration.table
        let (retentionSeconds, retentionAttoseconds) = configuration.resultRetention.components
        let retention = Double(retentionSeconds) + Double(retentionAttoseconds) / 1e18
        do {
            // Bounded: a session the server ended while it sat idle (a restart) was seen to leave a
            // statement waiting forever, and the leader's callers already have their result.
            try await Bounded.run(within: configuration.connectTimeout) { [value, failure] in
                guard !connection.isClosed else {
                    throw CoalescingPostgresError.databaseUnavailable("connection closed")
                }
                try await connection.perform(
                    """
                    INSERT INTO \(unescaped: table) (key, seq, started, value, failure_kind, failure, published_at)
                    VALUES (\(key), nextval(\(table + "_seq")), \(started), \(value), \(failure?.kind), \(failure?.message), now())
                    ON CONFLICT (key) DO UPDATE SET seq = excluded.seq, started = excluded.started, value = excluded.value,
                        failure_kind = excluded.failure_kind, failure = excluded.failure, published_at = excluded.published_at
                    """, logger: recorder.logger
                )
                try await connection.perform(
                    """
                    DELETE FROM \(unescaped: table) WHERE published_at < now() - make_interval(secs => \(retention))
                    """, logger: recorder.logger
                )
            }
        } catch {
            recorder.logger.warning(
                "could not publish a result; the processes waiting for it will run the work",
                metadata: ["key": "\(key)", "error": "\(String(reflecting: error))"])
            recorder.record(.publishFailed(key: key, error: String(reflecting: error))) { $0.publishFailures += 1 }
        }
    }

    private func unavailable<Value>(
        key: String, error: any Error, operation: @Sendable () async throws -> Value
    ) async throws -> Value {
        switch configuration.whenDatabaseUnavailable {
        case .runLocally:
            recorder.databaseUnavailable(key: key, error: error, ranLocally: true)
            return try await operation()
        case .fail:
            recorder.databaseUnavailable(key: key, error: error, ranLocally: false)
            throw CoalescingPostgresError.databaseUnavailable(String(describing: error))
        }
    }
}

/// The table and sequence, created once per coalescer under an advisory lock of their own, since
/// `CREATE … IF NOT EXISTS` races with itself across sessions.
struct Schema {
    let configuration: PostgresCoalescerConfiguration

    func create(on connection: PostgresConnection, logger: Logger) async throws {
        let table = configuration.table
        try await connection.perform(
            "SELECT pg_advisory_lock(hashtext('coalescing-schema'), hashtext(\(table)))", logger: logger
        )
        for statement in configuration.migrationSQL.split(separator: ";") where !statement.allSatisfy(\.isWhitespace) {
            try await connection.perform(PostgresQuery(unsafeSQL: String(statement)), logger: logger)
        }
        try await connection.perform(
            "SELECT pg_advisory_unlock(hashtext('coalescing-schema'), hashtext(\(table)))", logger: logger
        )
    }
}
extension PostgresConnection {
    /// Runs a statement whose rows, if any, do not matter, and waits for its end: a lock wait ends
    /// only when the lock is granted.
    func perform(_ query: PostgresQuery, logger: Logger) async throws {
        _ = try await self.query(query, logger: logger).collect()
    }

    /// Closes the connection unless it is closed already, which PostgresNIO requires before it goes.
    func closeIfOpen() async {
        if !isClosed { try? await close() }
    }
}
#endif
