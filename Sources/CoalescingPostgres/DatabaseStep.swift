#if Postgres
import CoalescingOperations
import Foundation
import Logging
import PostgresNIO

/// The cross-process half of a ``PostgresCoalescer``: for one process and key, either the run of
/// the work here or the value of another process's run.
///
/// The protocol, all of it PostgreSQL's own:
/// 1. The step registers with the ``Session`` when its first caller arrives: from then on, every
///    result and release of its key that the channel carries reaches it.
/// 2. It asks for the key's advisory lock without waiting, on the session. A step that gets it, and
///    has heard no result since it arrived, runs the work.
/// 3. The leader publishes the result and its notification in one statement: the database delivers
///    the notification when the row is committed, to every process at once. Then it releases the
///    lock and says so on the channel, so that a step that arrived after the result was committed
///    knows it must run the work itself.
/// 4. A step that did not get the lock waits for its key's news: a result (read by the full key, on
///    a pooled connection), a release without one (it asks again, and takes over), or a tick of
///    ``PostgresCoalescerConfiguration/takeOverInterval`` (a leader that died says nothing; its
///    session's end released its lock).
struct DatabaseStep: Sendable {
    let configuration: PostgresCoalescerConfiguration
    let session: Session
    let client: PostgresClient
    let recorder: StepRecorder

    /// The result for `key`: read from another process's publication, or from running `operation`.
    ///
    /// - Parameters:
    ///   - key: The full key.
    ///   - freshOnly: Accept only a run that started after this step arrived: the step of a caller
    ///     registered after ``PostgresCoalescer/forget(key:)``.
    ///   - operation: The work, run here if this step takes the lock and hears no result.
    /// - Returns: The value, from here or from another process.
    /// - Throws: The work's error, a ``CoalescingPostgresError``, or `CancellationError`.
    func run<Value: Codable & Sendable>(
        key: String, freshOnly: Bool, operation: @Sendable () async throws -> Value
    ) async throws -> Value {
        let lock = LockKey(table: configuration.table, key: key).value
        let found: Found<Value>
        do {
            found = try await find(key: key, lock: lock, freshOnly: freshOnly)
        } catch let error as CoalescingPostgresError where error.isUnavailable {
            try Task.checkCancellation()
            return try await unavailable(key: key, error: error, operation: operation)
        } catch let error as CoalescingPostgresError {
            if case .databaseError = error { recorder.databaseError(key: key, error: error) }
            throw error
        }
        // Outside the `do` above: the work's own errors are its callers' answer, whatever they are.
        switch found {
        case .served(let value): return value
        case .lead(let answer, let tookOver):
            return try await lead(key: key, lock: lock, answer: answer, tookOver: tookOver, operation: operation)
        }
    }

    /// What a step finds: another process's value, or the key's lock, to run the work.
    private enum Found<Value> {
        case served(Value)
        case lead(LockAnswer, tookOver: Bool)
    }

    /// Registers the step, then asks for the lock and waits for news until it has a value or the lock.
    private func find<Value: Decodable>(key: String, lock: Int64, freshOnly: Bool) async throws -> Found<Value> {
        let arrived = ContinuousClock.now
        let registration = session.register(lock)
        defer { session.unregister(registration) }
        var wakes = registration.wakes.makeAsyncIterator()
        var after: Int64?
        var attempted: UInt64?
        var mustAsk = true
        while true {
            let news = session.news(for: registration)
            if let result = news.result, freshOnly ? (after.map { result.started > $0 } ?? false) : true {
                if let inline = result.inline, inline.key == Publication.hex(key) {
                    return .served(try decoded(Data(inline.json.utf8), key: key, since: arrived))
                }
                if let value: Value = try await served(
                    key: key, result: result, after: freshOnly ? after : nil, since: arrived)
                {
                    return .served(value)
                }
                session.discardResult(of: registration)
                mustAsk = true
            }
            if let release = news.release, let attempted, release.position > attempted { mustAsk = true }
            if mustAsk {
                let answer = try await session.tryLock(lock, key: key)
                if after == nil { after = answer.sequence }
                let heard = session.news(for: registration)
                let freshResult = heard.result.map { freshOnly ? $0.started > answer.sequence : true } ?? false
                if answer.acquired, !freshResult {
                    // A take-over replaces a run that ended without a result: this step found the
                    // lock held (or heard its run given up) and now has it, with no result since.
                    // Only a release heard since the step last asked can say that run published;
                    // an older one (the run before, or a step's release after a result it heard)
                    // says nothing about the run the step was denied by.
                    let releasedSince = heard.release.flatMap { $0.position > (attempted ?? 0) ? $0 : nil }
                    let tookOver =
                        (attempted != nil || releasedSince?.published == false) && releasedSince?.published != true
                    return .lead(answer, tookOver: tookOver)
                }
                if answer.acquired { session.unlock(lock, .published, generation: answer.generation) }
                if attempted == nil, !freshResult { recorder.record(.waitingForAnotherProcess(key: key)) { _ in } }
                attempted = answer.position
                mustAsk = false
                if freshResult { continue }
            }
            switch await wakes.next() {
            case .news?: break
            case .tick?, .lost?: mustAsk = true
            case nil: throw CancellationError()
            }
        }
    }

    // MARK: - Leading

    private func lead<Value: Codable & Sendable>(
        key: String, lock: Int64, answer: LockAnswer, tookOver: Bool,
        operation: @Sendable () async throws -> Value
    ) async throws -> Value {
        recorder.record(.ranHere(key: key, tookOver: tookOver)) {
            $0.runsHere += 1
            if tookOver { $0.takeOvers += 1 }
        }
        let result = await Result { try await operation() }
        if case .failure(let error) = result, error is CancellationError || Task.isCancelled {
            // Cancelled work publishes nothing: a waiting process runs it.
            session.unlock(lock, .abandoned, generation: answer.generation)
            throw error
        }
        var publication = Publication(
            result, key: key, lock: lock, started: answer.sequence, generation: answer.generation,
            limit: configuration.maximumValueBytes, recorder: recorder)
        if publication.inline.isEmpty {
            // Too large to travel in a notification: written on a pooled connection first, so that
            // no statement of the session grows with a value.
            do {
                publication.sequence = try await Mailbox(configuration: configuration).store(
                    publication, client: client, logger: recorder.logger)
            } catch {
                session.notPublished([publication], CoalescingPostgresError(error))
                session.unlock(lock, .abandoned, generation: answer.generation)
                return try result.get()
            }
        }
        // This process's callers have their result now; the others hear it when the session has
        // announced it, with other leaders' results, and released the lock (a graceful shutdown
        // waits for it). A caller of this process that arrives meanwhile waits for the same
        // publication, as another process's would.
        session.publishAndRelease(publication)
        return try result.get()
    }

    // MARK: - Following

    /// The value another process published for `key`, read by the full key; nil if the row now
    /// holds an older result (gone from the table) or, for a forgetting step, one that started
    /// before `after`.
    private func served<Value: Decodable>(
        key: String, result: Heard, after: Int64?,
        since arrived: ContinuousClock.Instant
    ) async throws -> Value? {
        let keyBytes = Data(key.utf8)
        let table = configuration.table
        let row: (Int64, Int64, Data?, Int16?, String?)?
        do {
            row = try await Bounded.run(within: configuration.connectTimeout) { [client, recorder] in
                let rows = try await client.query(
                    """
                    SELECT seq, started, value, failure_kind, failure FROM \(unescaped: quoted(table))
                    WHERE key_hash = sha256(\(keyBytes)) AND key = \(keyBytes)
                    """, logger: recorder.logger)
                for try await row in rows.decode((Int64, Int64, Data?, Int16?, String?).self) { return Optional(row) }
                return nil
            }
        } catch let error as CancellationError {
            throw error
        } catch {
            throw CoalescingPostgresError(error)
        }
        guard let (sequence, started, data, failureKind, message) = row, sequence >= result.sequence,
            after.map({ started > $0 }) ?? true
        else { return nil }
        let failure: CoalescingPostgresError
        switch (data, failureKind) {
        case (let data?, _): return try decoded(data, key: key, since: arrived)
        case (nil, Publication.tooLarge):
            failure = .valueTooLarge(bytes: Int(message ?? "") ?? 0, limit: configuration.maximumValueBytes)
        case (nil, _):
            failure = .failedInAnotherProcess(message ?? "unknown error")
        }
        recorder.record(.failedInAnotherProcess(key: key, error: failure)) { $0.failuresFromAnotherProcess += 1 }
        throw failure
    }

    private func decoded<Value: Decodable>(_ data: Data, key: String, since arrived: ContinuousClock.Instant) throws
        -> Value
    {
        do {
            let value = try JSONDecoder().decode(Value.self, from: data)
            recorder.record(.servedFromAnotherProcess(key: key, waited: .now - arrived)) {
                $0.servedFromAnotherProcess += 1
            }
            return value
        } catch {
            let failure = CoalescingPostgresError.undecodableValue(String(describing: error))
            recorder.record(.failedInAnotherProcess(key: key, error: failure)) { $0.failuresFromAnotherProcess += 1 }
            throw failure
        }
    }

    private func unavailable<Value>(
        key: String, error: CoalescingPostgresError, operation: @Sendable () async throws -> Value
    ) async throws -> Value {
        switch configuration.whenDatabaseUnavailable {
        case .runLocally:
            recorder.databaseUnavailable(key: key, error: error, ranLocally: true)
            return try await operation()
        case .fail:
            recorder.databaseUnavailable(key: key, error: error, ranLocally: false)
            throw error
        }
    }
}

/// What a leader hands the session: its result, encoded, to publish for the other processes before
/// its lock is released.
struct Publication: Sendable, Hashable {
    static let threw: Int16 = 1
    static let tooLarge: Int16 = 2
    /// A notification's payload is at most 8000 bytes; a small value travels in it, so that the
    /// processes waiting need not read the table.
    static let inlineLimit = 4000

    let lock: Int64
    let key: String
    let started: Int64
    let generation: Int
    /// The row's sequence value once the result is written to the table; 0 for a result that
    /// travels in its notification, which the session numbers as it sends it.
    var sequence: Int64 = 0
    let value: Data?
    /// 0 for a value, `threw` or `tooLarge` for a failure.
    let failureKind: Int16
    let failure: String
    /// ` <key in hex> <value as JSON>`, or empty when the value does not fit in a notification.
    let inline: String

    init<Value: Encodable>(
        _ result: Result<Value, any Error>, key: String, lock: Int64, started: Int64, generation: Int, limit: Int,
        recorder: StepRecorder
    ) {
        self.key = key
        self.lock = lock
        self.started = started
        self.generation = generation
        var value: Data?
        var failure: (kind: Int16, message: String) = (0, "")
        switch result {
        case .success(let produced):
            do {
                let data = try JSONEncoder().encode(produced)
                if data.count > limit {
                    failure = (Self.tooLarge, String(data.count))
                    recorder.record(.publishFailed(key: key, error: "the value takes \(data.count) bytes")) {
                        $0.valuesTooLarge += 1
                    }
                } else {
                    value = data
                }
            } catch {
                failure = (Self.threw, "the value did not encode: \(error)")
            }
        case .failure(let error):
            failure = (Self.threw, String(describing: error))
        }
        self.value = value
        failureKind = failure.kind
        // `text` holds no NUL; an error's description may.
        self.failure = failure.message.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}")
        let hex = Self.hex(key)
        if let value, hex.utf8.count + value.count < Self.inlineLimit, let json = String(data: value, encoding: .utf8) {
            inline = " \(hex) \(json)"
        } else {
            inline = ""
        }
    }

    /// The notification: `<lock> <sequence> <started>`, then ` <key in hex> <value as JSON>` when the
    /// value travels in it. A result in the table is numbered by its row; one that travels, by its
    /// run's start, which orders it after every earlier result of its lock as well, since the runs
    /// of a lock never overlap and a run starts after the last one's row was written.
    var payload: String {
        "\(lock) \(sequence == 0 ? started : sequence) \(started)\(inline)"
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
#endif
