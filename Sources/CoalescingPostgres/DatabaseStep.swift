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
///    result and release of its key that the session hears reaches it.
/// 2. It asks for the key's advisory lock without waiting, on the session, after taking the key's
///    watch (a shared advisory lock): from then on, a leader in any process knows that this
///    process waits. A step that gets the lock, and has heard no result since it arrived, runs
///    the work.
/// 3. The leader ends its run in one statement when nobody waits: its lock goes, and nobody is
///    told. When a process waits, its result goes out in a notification, which the database
///    delivers when the statement commits; then the lock goes, and the waiting processes are told.
/// 4. A step that did not get the lock waits for its key's news: a result (read by the full key, on
///    a pooled connection, unless it travelled in the notification), a release without one (it
///    asks again, and takes over), or a tick of ``PostgresCoalescerConfiguration/takeOverInterval``
///    (a leader that died says nothing; its session's end released its lock).
///
/// The decisions are a ``StepStateMachine``'s; this carries them out.
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

    /// Registers the step, then asks for the lock and waits for news until it has a value or the
    /// lock: the step's machine decides, this carries out.
    private func find<Value: Decodable>(key: String, lock: Int64, freshOnly: Bool) async throws -> Found<Value> {
        let arrived = session.clock.now()
        let registration = session.register(lock)
        defer { session.unregister(registration) }
        var wakes = registration.wakes.makeAsyncIterator()
        var machine = StepStateMachine(freshOnly: freshOnly)
        while true {
            switch machine.look(session.news(for: registration)) {
            case .take(let result):
                let after = machine.freshOnly ? machine.after : nil
                if let value: Value = try await taken(result, key: key, after: after, since: arrived) {
                    return .served(value)
                }
                session.discardResult(of: registration)
                machine.resultGone()
            case .ask(let first):
                let answer = try await session.tryLock(lock, key: key, first: first)
                switch machine.answered(answer, news: session.news(for: registration)) {
                case .lead(let tookOver): return .lead(answer, tookOver: tookOver)
                case .giveBack: session.unlock(lock, .published, generation: answer.generation)
                case .waiting: recorder.record(.waitingForAnotherProcess(key: key)) { _ in }
                case .look: break
                }
            case .wait:
                guard let wake = await wakes.next() else { throw CancellationError() }
                machine.woke(wake)
            }
        }
    }

    /// The value of a result heard: from its notification when it carries this key's value, else
    /// read from the table; nil when the result is not this key's, or no longer there.
    private func taken<Value: Decodable>(
        _ result: Heard, key: String, after: Int64?, since arrived: Duration
    ) async throws -> Value? {
        if let inline = result.inline, inline.key == ChannelMessage.hex(key) {
            return try decoded(Data(inline.json.utf8), key: key, since: arrived)
        }
        return try await served(key: key, result: result, after: after, since: arrived)
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
        session.endRun(publication)
        return try result.get()
    }

    // MARK: - Following

    /// The value another process published for `key`, read by the full key; nil if the row now
    /// holds an older result (gone from the table) or, for a forgetting step, one that started
    /// before `after`.
    private func served<Value: Decodable>(
        key: String, result: Heard, after: Int64?,
        since arrived: Duration
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

    private func decoded<Value: Decodable>(_ data: Data, key: String, since arrived: Duration) throws
        -> Value
    {
        do {
            let value = try JSONDecoder().decode(Value.self, from: data)
            recorder.record(.servedFromAnotherProcess(key: key, waited: session.clock.now() - arrived)) {
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

// The encoding of a leader's result, beside the step that records one too large; the publication
// itself is a plain value, in Channel.swift.
extension Publication {
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
        let hex = ChannelMessage.hex(key)
        if let value, hex.utf8.count + value.count < Self.inlineLimit, let json = String(data: value, encoding: .utf8) {
            inline = " \(hex) \(json)"
        } else {
            inline = ""
        }
    }
}
#endif
