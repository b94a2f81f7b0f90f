#if Postgres
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// The one connection of a process that listens on the table's channel and holds its advisory
/// locks: leased from the pool for as long as the coalescer runs, so that a process holds the pool
/// and this one session, whatever the keys in flight.
///
/// Steps never open a connection to wait. A step registers at its arrival (``register(_:)``), and
/// from then on every notification about its key reaches it, in the order the database committed
/// them; `position` counts the notifications heard, so that a step tells what came after it
/// arrived. Its lock requests wait in ``State/pending`` and go out together, one statement for all
/// of them (``execute(_:on:)``), followed by a barrier: once the barrier answers, every
/// notification committed before the locks were granted has been heard: PostgreSQL sends a
/// session's notifications before it reports the session ready for its next statement, and
/// PostgresNIO hands each one to the listener on the connection's event loop as it reads it, before
/// the next statement's answer.
///
/// Lock order: `state` is the only lock here, and nothing is called while it is held but
/// `AsyncStream.Continuation.yield`, which takes no lock of ours.
final class Session: Sendable {
    let configuration: PostgresCoalescerConfiguration
    let recorder: StepRecorder
    private let state = NIOLockedValueBox(State())
    /// Wakes the statement loop: a request, an unlock or a keep-alive is waiting.
    private let kicks: AsyncStream<Void>
    private let kick: AsyncStream<Void>.Continuation

    init(configuration: PostgresCoalescerConfiguration, recorder: StepRecorder) {
        self.configuration = configuration
        self.recorder = recorder
        (kicks, kick) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    // MARK: - Steps

    /// A step's place in the channel: from its registration on, what is heard about its key is
    /// kept for it, so everything it is told came after it arrived.
    struct Registration: Sendable {
        let id: Int
        let lock: Int64
        let wakes: AsyncStream<Wake>
    }

    /// Why a waiting step should look again.
    enum Wake: Sendable {
        case news, tick, lost
    }

    /// The latest result and the latest release of a key heard after a step arrived.
    struct News: Sendable {
        var result: Heard?
        var release: (published: Bool, position: UInt64)?
    }

    /// A result heard on the channel; `inline` holds the key (in hex) and the value, when the value
    /// was small enough to travel in the notification.
    struct Heard: Sendable {
        var sequence: Int64
        var started: Int64
        var position: UInt64
        var inline: (key: Substring, json: Substring)?
    }

    /// A lock request's answer, once every notification committed before it has been heard.
    struct LockAnswer: Sendable {
        var acquired: Bool
        /// `nextval` of the table's sequence, taken with the lock: a run's start, and the line a
        /// forgetting step's run must start after.
        var sequence: Int64
        var position: UInt64
        var generation: Int
    }

    /// What a leader's release tells the others.
    enum Release: String, Sendable {
        /// A result for the key was published before the lock was released.
        case published
        /// The leader gave up without a result: a waiting process takes over.
        case abandoned
        /// A second lock of this process on a key it already leads: no one is told.
        case silent = ""
    }

    func register(_ lock: Int64) -> Registration {
        let (wakes, wake) = AsyncStream.makeStream(of: Wake.self, bufferingPolicy: .bufferingNewest(1))
        return state.withLockedValue { state in
            state.nextID += 1
            state.waiters[lock, default: [:]][state.nextID] = Waiter(wake: wake)
            return Registration(id: state.nextID, lock: lock, wakes: wakes)
        }
    }

    func unregister(_ registration: Registration) {
        let waiter = state.withLockedValue { state in
            defer { if state.waiters[registration.lock]?.isEmpty == true { state.waiters[registration.lock] = nil } }
            return state.waiters[registration.lock]?.removeValue(forKey: registration.id)
        }
        waiter?.wake.finish()
    }

    func news(for registration: Registration) -> News {
        state.withLockedValue { $0.waiters[registration.lock]?[registration.id]?.news ?? News() }
    }

    /// Forgets a result that turned out to be gone from the table, so that the step asks again.
    func discardResult(of registration: Registration) {
        state.withLockedValue { $0.waiters[registration.lock]?[registration.id]?.news.result = nil }
    }

    /// Asks for the key's lock without waiting for it; answers once the notifications committed
    /// before the answer have been heard.
    ///
    /// - Parameters:
    ///   - lock: The key's lock.
    ///   - key: The key, for the event that says a lock was lost.
    ///   - limit: How long the request may wait for a session and its answer.
    /// - Returns: Whether the lock was granted, with the sequence value taken beside it.
    /// - Throws: ``CoalescingPostgresError/databaseUnavailable(_:)`` while the session is down or
    ///   stopping, or when `limit` passes; `CancellationError` if the step is cancelled first. A
    ///   lock granted to a request given up meanwhile is released for the others.
    func tryLock(_ lock: Int64, key: String, within limit: Duration) async throws -> LockAnswer {
        let id = state.withLockedValue { state in
            state.nextID += 1
            return state.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<LockAnswer, any Error>) in
                let deadline = Task { [weak self] in
                    guard (try? await Task.sleep(for: limit)) != nil else { return }
                    self?.giveUp(id, CoalescingPostgresError.databaseUnavailable("no answer within \(limit)"))
                }
                let request = Request(id: id, lock: lock, key: key, continuation: continuation, deadline: deadline)
                let refused: (any Error)? = state.withLockedValue { state in
                    // A cancellation that came before the request was queued found nothing to give up.
                    if Task.isCancelled { return CancellationError() }
                    switch state.phase {
                    case .down(let error): return error
                    case .stopping, .stopped:
                        return CoalescingPostgresError.databaseUnavailable("the coalescer is shutting down")
                    case .idle, .connecting, .ready:
                        state.pending.append(request)
                        return nil
                    }
                }
                if let refused { request.resume(.failure(refused)) } else { kick.yield() }
            }
        } onCancel: {
            giveUp(id, CancellationError())
        }
    }

    /// Ends a request that was cancelled or whose time ran out: at once if it was not sent yet;
    /// otherwise when its answer comes, releasing a lock granted meanwhile.
    private func giveUp(_ id: Int, _ error: any Error) {
        let request = state.withLockedValue { state -> Request? in
            if let index = state.pending.firstIndex(where: { $0.id == id }) { return state.pending.remove(at: index) }
            if state.inFlight.contains(id) { state.givenUp[id] = error }
            return nil
        }
        request?.resume(.failure(error))
    }

    /// Publishes a leader's result with its notification, then releases its lock: in one statement
    /// with the other leaders' results, then with their releases. A publication whose session was
    /// lost is still published, by the next session; its lock went with the old one.
    func publishAndRelease(_ publication: Publication) {
        state.withLockedValue { $0.publications.append(publication) }
        kick.yield()
    }

    /// Releases a lock this step holds, in the session generation that granted it; a lock of a
    /// session that has since been lost is gone already.
    func unlock(_ lock: Int64, _ release: Release, generation: Int) {
        let queued = state.withLockedValue { state in
            guard state.generation == generation, state.lostGeneration < generation else { return false }
            if release != .silent { state.leaders[lock] = nil }
            state.unlocks.append((lock, release))
            return true
        }
        if queued { kick.yield() }
    }

    // MARK: - The session's life

    /// Keeps a session open on `client` until `stop` ends it: reconnects after a loss, marks the
    /// database unavailable when it cannot connect within the configured time, keeps the session
    /// alive, wakes waiting steps for take-over checks, and sweeps old results.
    func run(client: PostgresClient) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.repeating(every: self.configuration.takeOverInterval) { self.tick() } }
            group.addTask { await self.repeating(every: self.configuration.keepAliveInterval) { self.keepAlive() } }
            group.addTask {
                await self.repeating(every: self.configuration.resultRetention) { await self.sweep(client) }
            }
            await connectUntilStopped(client)
            group.cancelAll()
        }
    }

    /// Stops taking requests; `draining` lets the steps that lead finish and release their locks
    /// first (a graceful shutdown), otherwise everything ends at once.
    func stop(draining: Bool) {
        let (requests, waiters) = state.withLockedValue { state in
            if draining, state.isLeading {
                state.phase = .stopping
            } else {
                state.phase = .stopped
            }
            defer { state.pending = [] }
            return (state.pending, state.waiters.values.flatMap(\.values))
        }
        for request in requests {
            request.resume(.failure(CoalescingPostgresError.databaseUnavailable("the coalescer is shutting down")))
        }
        for waiter in waiters { waiter.wake.yield(.lost) }
        kick.yield()
    }

    private func connectUntilStopped(_ client: PostgresClient) async {
        var backoff = Duration.milliseconds(50)
        while !Task.isCancelled {
            guard let generation = beginConnecting() else { return }
            let deadline = Task { [configuration] in
                try await Task.sleep(for: configuration.connectTimeout)
                self.connectionFailed(
                    self.recorder.noSession(within: configuration.connectTimeout), generation: generation)
            }
            do {
                try await client.withConnection { connection in
                    deadline.cancel()
                    try await self.serve(connection, generation: generation)
                }
                return
            } catch {
                deadline.cancel()
                let failure = CoalescingPostgresError(error)
                lost(generation, failure)
                // A session that was serving reconnects at once; one that could not be had waits a little longer each time.
                if !wasReady(generation) {
                    connectionFailed(failure, generation: generation)
                    try? await Task.sleep(for: backoff)
                    backoff = min(backoff * 2, .seconds(2))
                } else {
                    backoff = .milliseconds(50)
                }
            }
        }
    }

    /// Prepares a leased connection as the session, then runs its statements until the coalescer
    /// stops; throws when the session is lost.
    private func serve(_ connection: PostgresConnection, generation: Int) async throws {
        let logger = recorder.logger
        let table = configuration.table
        // The session must outlive the database's idle timeouts while a leader's work runs, and
        // its commits need not wait for the disk: the mailbox is unlogged, and a result lost in a
        // crash only means the work runs again. The session's own settings, reset before the
        // connection goes back to the pool.
        try await connection.perform(
            """
            SELECT set_config(name, CASE name WHEN 'synchronous_commit' THEN 'off' ELSE '0' END, false)
            FROM pg_settings
            WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout', 'synchronous_commit')
            """, logger: logger)
        if configuration.createsTable {
            try await Schema(configuration: configuration).create(on: connection, logger: logger)
        }
        let listening = try await connection.addListenerWhileOpen(channel: table) { [weak self] _, notification in
            self?.heard(notification.payload, generation: generation)
        }
        defer { listening.stop() }
        try await hello(on: connection)
        connection.closeFuture.whenComplete { [weak self] _ in
            self?.lost(generation, CoalescingPostgresError.databaseUnavailable("the session's connection closed"))
        }
        becameReady(generation)
        for await _ in kicks {
            while let batch = takeBatch(generation) {
                try await execute(batch, on: connection)
            }
            if isOver(generation) { break }
        }
        guard isStopped else { throw CoalescingPostgresError.databaseUnavailable("the session's connection closed") }
        try? await connection.perform("SELECT pg_advisory_unlock_all()", logger: logger)
        try? await connection.perform(
            """
            SELECT set_config(name, reset_val, false) FROM pg_settings
            WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout', 'synchronous_commit')
            """, logger: logger)
    }

    /// Proves the channel is heard before any step counts on it: a notification of its own, back.
    /// PostgresNIO sends `LISTEN` when the listener is added, without saying when it took effect,
    /// so the notification is sent again until one is heard.
    private func hello(on connection: PostgresConnection) async throws {
        let deadline = ContinuousClock.now + configuration.connectTimeout
        while ContinuousClock.now < deadline, !isStopped, !connection.isClosed {
            let token = UUID().uuidString
            let heard = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                state.withLockedValue { $0.hello = (token, continuation) }
                Task {
                    try? await connection.perform(
                        "SELECT pg_notify(\(configuration.table), \("hello " + token))", logger: recorder.logger)
                    try? await Task.sleep(for: .milliseconds(100))
                    self.answerHello(token, heard: false)
                }
            }
            if heard { return }
        }
        throw CoalescingPostgresError.databaseUnavailable("the session did not hear its own notification")
    }

    private func answerHello(_ token: String, heard: Bool) {
        let continuation = state.withLockedValue { state -> CheckedContinuation<Bool, Never>? in
            guard let (expected, continuation) = state.hello, expected == token else { return nil }
            state.hello = nil
            return continuation
        }
        continuation?.resume(returning: heard)
    }

    /// One turn of the statement loop: the results first, so that they are committed before their
    /// locks are released; then the lock requests, those that came meanwhile included; then the
    /// releases, in a statement that is also the barrier the lock answers wait for, and the
    /// keep-alive.
    private func execute(_ batch: Batch, on connection: PostgresConnection) async throws {
        let logger = recorder.logger
        if !batch.publications.isEmpty {
            try await publish(batch.publications, on: connection)
        }
        let requests = takeRequests()
        do {
            var answers: [(Bool, Int64)] = []
            if !requests.isEmpty {
                try await statement(on: connection) {
                    let sequence = quoted(configuration.table + "_seq")
                    // One request alone, the usual case but under load, in a statement that plans faster.
                    let rows =
                        if requests.count == 1 {
                            try await connection.rows(
                                "SELECT pg_try_advisory_lock(\(requests[0].lock)), nextval(\(sequence)::regclass)",
                                logger: logger)
                        } else {
                            try await connection.rows(
                                """
                                SELECT pg_try_advisory_lock(l.id), nextval(\(sequence)::regclass)
                                FROM unnest(\(requests.map(\.lock))::bigint[]) WITH ORDINALITY AS l(id, n) ORDER BY l.n
                                """, logger: logger)
                        }
                    for row in rows { answers.append(try row.decode((Bool, Int64).self)) }
                }
            }
            let unlocks = takeUnlocks()
            if !unlocks.isEmpty || answers.contains(where: \.0) || batch.keepAlive {
                try await statement(on: connection) {
                    try await connection.perform(
                        """
                        SELECT pg_advisory_unlock(u.id),
                            CASE WHEN u.how <> '' THEN pg_notify(\(configuration.table), u.id::text || ' released ' || u.how) END
                        FROM unnest(\(unlocks.map(\.0))::bigint[], \(unlocks.map(\.1.rawValue))::text[]) AS u(id, how)
                        """, logger: logger)
                }
            }
            if !requests.isEmpty { answered(requests, answers) }
        } catch {
            let failure = CoalescingPostgresError(error)
            guard failure.isUnavailable else {
                // The database answered with an error (a missing sequence, a privilege): the steps'
                // callers hear it, and the session goes on.
                for request in requests { request.resume(.failure(failure)) }
                return
            }
            // The step asks again, in the next session, within its own deadline.
            for request in requests { request.resume(.failure(SessionLost())) }
            throw error
        }
    }

    private func takeRequests() -> [Request] {
        state.withLockedValue { state in
            defer { state.pending = [] }
            state.inFlight = Set(state.pending.map(\.id))
            return state.pending
        }
    }

    /// Publishes the results of a batch, each with its notification, and queues their releases.
    /// A value that travels in its notification needs no row: every step waiting for it hears it,
    /// and one that arrives later needs a run of its own. The others are written to the table, one
    /// statement for all of them. A result the database refused is counted, and its lock released
    /// for a take-over.
    private func publish(_ publications: [Publication], on connection: PostgresConnection) async throws {
        let carried = publications.filter { !$0.inline.isEmpty }
        let stored = publications.filter(\.inline.isEmpty)
        if !carried.isEmpty {
            try await publishing(carried, on: connection) { try await notify(carried, on: connection) }
        }
        if stored.count == 1 {
            try await publishing(stored, on: connection) { try await publishOne(stored[0], on: connection) }
        } else if !stored.isEmpty {
            try await publishing(stored, on: connection) { try await upsert(stored, on: connection) }
        }
    }

    private func publishing(
        _ publications: [Publication], on connection: PostgresConnection, _ body: () async throws -> Void
    ) async throws {
        var released = Release.published
        do {
            try await statement(on: connection, body)
        } catch {
            let cause = CoalescingPostgresError(error)
            released = .abandoned
            for publication in publications {
                recorder.logger.warning(
                    "could not publish a result; the processes waiting for it will take over",
                    metadata: ["key": "\(publication.key.prefix(200))", "error": "\(cause)"])
                recorder.record(.publishFailed(key: publication.key, error: cause.description)) {
                    $0.publishFailures += 1
                }
            }
            if cause.isUnavailable { throw error }
        }
        for publication in publications { unlock(publication.lock, released, generation: publication.generation) }
    }

    /// Values small enough to travel in their notifications: no row, no upsert, a few microseconds
    /// of the server's time where the upsert took a third of a millisecond.
    private func notify(_ publications: [Publication], on connection: PostgresConnection) async throws {
        let table = configuration.table
        try await connection.perform(
            """
            SELECT pg_notify(\(table), n.lock || ' ' || nextval(\(quoted(table + "_seq"))::regclass) || ' '
                || n.started || n.inline)
            FROM unnest(\(publications.map { String($0.lock) })::text[], \(publications.map(\.started))::bigint[],
                \(publications.map(\.inline))::text[]) AS n(lock, started, inline)
            """, logger: recorder.logger)
    }

    /// Results written to the table, each with a notification that names its row.
    private func upsert(_ publications: [Publication], on connection: PostgresConnection) async throws {
        let table = configuration.table
        try await connection.perform(
            """
            WITH input AS (
                SELECT * FROM unnest(
                    \(publications.map { ByteBuffer(bytes: Array($0.key.utf8)) })::bytea[],
                    \(publications.map(\.started))::bigint[],
                    \(publications.map { ByteBuffer(bytes: $0.value ?? Data()) })::bytea[],
                    \(publications.map { $0.value != nil })::bool[],
                    \(publications.map(\.failureKind))::int2[], \(publications.map(\.failure))::text[],
                    \(publications.map { String($0.lock) })::text[], \(publications.map(\.inline))::text[])
                    AS i(key, started, value, has_value, failure_kind, failure, lock, inline)),
            published AS (
                INSERT INTO \(unescaped: quoted(table)) AS r
                    (key_hash, key, seq, started, value, failure_kind, failure, published_at)
                SELECT sha256(key), key, nextval(\(quoted(table + "_seq"))::regclass), started,
                    CASE WHEN has_value THEN value END, NULLIF(failure_kind, 0), NULLIF(failure, ''), now()
                FROM input
                ON CONFLICT (key_hash) DO UPDATE SET key = excluded.key, seq = excluded.seq,
                    started = excluded.started, value = excluded.value, failure_kind = excluded.failure_kind,
                    failure = excluded.failure, published_at = excluded.published_at
                RETURNING key_hash, seq)
            SELECT pg_notify(\(table), i.lock || ' ' || p.seq || ' ' || i.started || i.inline)
            FROM published p JOIN input i ON p.key_hash = sha256(i.key)
            """, logger: recorder.logger)
    }

    /// One result alone, in a statement that plans in half the time of the batch's (0.31 against
    /// 0.59 ms, by pgbench on loopback): the join of a caller of another process waits for it.
    private func publishOne(_ publication: Publication, on connection: PostgresConnection) async throws {
        let table = configuration.table
        let key = ByteBuffer(bytes: Array(publication.key.utf8))
        let value = publication.value.map { ByteBuffer(bytes: $0) }
        let failureKind = publication.failureKind == 0 ? nil : publication.failureKind
        let failure = publication.failure.isEmpty ? nil : publication.failure
        try await connection.perform(
            """
            WITH published AS (
                INSERT INTO \(unescaped: quoted(table)) AS r
                    (key_hash, key, seq, started, value, failure_kind, failure, published_at)
                VALUES (sha256(\(key)), \(key), nextval(\(quoted(table + "_seq"))::regclass), \(publication.started),
                    \(value), \(failureKind), \(failure), now())
                ON CONFLICT (key_hash) DO UPDATE SET key = excluded.key, seq = excluded.seq,
                    started = excluded.started, value = excluded.value, failure_kind = excluded.failure_kind,
                    failure = excluded.failure, published_at = excluded.published_at
                RETURNING seq)
            SELECT pg_notify(\(table), \(String(publication.lock)) || ' ' || seq || ' ' || \(String(publication.started))
                || \(publication.inline))
            FROM published
            """, logger: recorder.logger)
    }

    private func takeUnlocks() -> [(Int64, Release)] {
        state.withLockedValue { state in
            defer { state.unlocks = [] }
            return state.unlocks
        }
    }

    /// Runs one statement of the session under the watchdog that ``keepAlive()`` reads.
    private func statement(on connection: PostgresConnection, _ body: () async throws -> Void) async throws {
        state.withLockedValue { $0.statementSince = (.now, connection) }
        defer { state.withLockedValue { $0.statementSince = nil } }
        try await body()
    }

    // MARK: - Events of the session, under the lock

    private func beginConnecting() -> Int? {
        state.withLockedValue { state in
            switch state.phase {
            case .stopping, .stopped: return nil
            case .idle, .connecting, .ready, .down:
                state.generation += 1
                // A session that was down stays down for new steps until one connects again.
                if case .down = state.phase {} else { state.phase = .connecting }
                return state.generation
            }
        }
    }

    private func becameReady(_ generation: Int) {
        let wasDown = state.withLockedValue { state in
            guard state.generation == generation, state.lostGeneration < generation else { return false }
            state.readyGeneration = generation
            switch state.phase {
            case .stopping, .stopped: return false
            case .down:
                state.phase = .ready
                return true
            case .idle, .connecting, .ready:
                state.phase = .ready
                return false
            }
        }
        if wasDown { recorder.databaseAnswered() }
        kick.yield()
    }

    private func wasReady(_ generation: Int) -> Bool {
        state.withLockedValue { $0.readyGeneration == generation }
    }

    /// No session could be had within the configured time: the waiting requests fail, and so does
    /// every new one until a session connects again.
    private func connectionFailed(_ error: CoalescingPostgresError, generation: Int) {
        let requests = state.withLockedValue { state in
            guard state.generation == generation, state.readyGeneration != generation else { return [Request]() }
            switch state.phase {
            case .stopping, .stopped: return []
            case .idle, .connecting, .ready, .down:
                state.phase = .down(error)
                defer { state.pending = [] }
                return state.pending
            }
        }
        for request in requests { request.resume(.failure(error)) }
    }

    /// A session ended under its steps: the locks it held are gone, and every waiting step looks
    /// again; requests not yet sent wait for the next session.
    private func lost(_ generation: Int, _ error: CoalescingPostgresError) {
        let (leaders, waiters, hello) = state.withLockedValue { state in
            guard state.lostGeneration < generation else { return ([String](), [Waiter](), state.hello) }
            state.lostGeneration = generation
            if case .ready = state.phase { state.phase = .connecting }
            defer {
                state.leaders = [:]
                state.unlocks = []
                state.hello = nil
            }
            return (Array(state.leaders.values), state.waiters.values.flatMap(\.values), state.hello)
        }
        hello?.1.resume(returning: false)
        for key in leaders { recorder.lockLost(key: key, error: error) }
        for waiter in waiters { waiter.wake.yield(.lost) }
        kick.yield()
    }

    private func takeBatch(_ generation: Int) -> Batch? {
        state.withLockedValue { state in
            guard state.generation == generation, state.lostGeneration < generation else { return nil }
            let batch = Batch(publications: state.publications, keepAlive: state.keepAliveDue)
            guard !batch.publications.isEmpty || !state.pending.isEmpty || !state.unlocks.isEmpty || batch.keepAlive
            else { return nil }
            state.publications = []
            state.keepAliveDue = false
            return batch
        }
    }

    /// Whether the statement loop of `generation` is over: its session lost, or the coalescer
    /// stopped (once the steps that lead have released their locks, in a graceful shutdown).
    private func isOver(_ generation: Int) -> Bool {
        state.withLockedValue { state in
            switch state.phase {
            case .stopped: return true
            case .stopping:
                guard !state.isLeading, state.unlocks.isEmpty else { return false }
                state.phase = .stopped
                return true
            case .idle, .connecting, .ready, .down: return state.lostGeneration >= generation
            }
        }
    }

    /// Whether a session is up: connected, listening, and heard its own notification.
    var isReady: Bool {
        state.withLockedValue { if case .ready = $0.phase { true } else { false } }
    }

    private var isStopped: Bool {
        state.withLockedValue { if case .stopped = $0.phase { true } else { false } }
    }

    /// Hands each request its answer. A second lock on a key this process already leads (two
    /// local steps whose keys share a lock) is released at once and answered as held; a lock
    /// granted to a step cancelled meanwhile is released for the others.
    private func answered(_ requests: [Request], _ answers: [(Bool, Int64)]) {
        var replies: [(Request, Result<LockAnswer, any Error>)] = []
        let queuedUnlocks = state.withLockedValue { state in
            var queued = false
            state.inFlight = []
            for (request, (granted, sequence)) in zip(requests, answers) {
                let givenUp = state.givenUp.removeValue(forKey: request.id)
                var acquired = granted
                if granted, givenUp != nil || state.leaders[request.lock] != nil {
                    state.unlocks.append((request.lock, givenUp != nil ? .abandoned : .silent))
                    queued = true
                    acquired = false
                }
                if acquired { state.leaders[request.lock] = request.key }
                let answer = LockAnswer(
                    acquired: acquired, sequence: sequence, position: state.heard, generation: state.generation)
                if let givenUp {
                    replies.append((request, .failure(givenUp)))
                } else {
                    replies.append((request, .success(answer)))
                }
            }
            return queued
        }
        for (request, reply) in replies { request.resume(reply) }
        if queuedUnlocks { kick.yield() }
    }

    /// One notification of the channel: `<lock> <sequence> <started>` for a published result,
    /// `<lock> released <how>` for a released lock, `hello <token>` for the session's own check.
    private func heard(_ payload: String, generation: Int) {
        let words = payload.split(separator: " ", maxSplits: 4, omittingEmptySubsequences: false)
        if words.first == "hello", words.count == 2 {
            answerHello(String(words[1]), heard: true)
            return
        }
        state.withLockedValue { state in
            guard state.generation == generation else { return }
            state.heard += 1
            guard words.count >= 3, let lock = Int64(words[0]), let waiters = state.waiters[lock] else { return }
            for (id, var waiter) in waiters {
                if words[1] == "released" {
                    waiter.news.release = (words[2] == Release.published.rawValue, state.heard)
                } else if let sequence = Int64(words[1]), let started = Int64(words[2]),
                    sequence > waiter.news.result?.sequence ?? .min
                {
                    let inline = words.count == 5 ? (words[3], words[4]) : nil
                    waiter.news.result = Heard(
                        sequence: sequence, started: started, position: state.heard, inline: inline)
                }
                state.waiters[lock]?[id] = waiter
                waiter.wake.yield(.news)
            }
        }
    }

    private func tick() {
        let waiters = state.withLockedValue { $0.waiters.values.flatMap(\.values) }
        for waiter in waiters { waiter.wake.yield(.tick) }
    }

    /// Asks the session to answer; closes a session whose statement has gone unanswered too long,
    /// so that its loss is seen within about a second even when the network says nothing.
    private func keepAlive() {
        let limit = max(configuration.keepAliveInterval * 2, .seconds(1))
        let silent = state.withLockedValue { state -> PostgresConnection? in
            state.keepAliveDue = true
            guard let (since, connection) = state.statementSince, ContinuousClock.now - since > limit else {
                return nil
            }
            return connection
        }
        silent?.close().whenComplete { _ in }
        kick.yield()
    }

    private func sweep(_ client: PostgresClient) async {
        guard state.withLockedValue({ if case .ready = $0.phase { true } else { false } }) else { return }
        let (seconds, attoseconds) = configuration.resultRetention.components
        let retention = Double(seconds) + Double(attoseconds) / 1e18
        do {
            try await Bounded.run(within: configuration.connectTimeout) { [configuration, recorder] in
                try await client.perform(
                    """
                    DELETE FROM \(unescaped: quoted(configuration.table))
                    WHERE published_at < now() - make_interval(secs => \(retention))
                    """, logger: recorder.logger)
            }
        } catch {
            recorder.logger.notice(
                "could not sweep old results", metadata: ["error": "\(CoalescingPostgresError(error))"])
        }
    }

    private func repeating(every interval: Duration, _ body: @Sendable () async -> Void) async {
        while (try? await Task.sleep(for: interval)) != nil { await body() }
    }

    // MARK: - State

    private enum Phase {
        /// `run()` has not started: requests wait, bounded by each step's own deadline.
        case idle
        case connecting
        case ready
        /// The last attempt failed: new requests fail at once until a session connects.
        case down(CoalescingPostgresError)
        /// A graceful shutdown: the steps that lead finish and release their locks.
        case stopping
        case stopped
    }

    private struct Waiter {
        var news = News()
        let wake: AsyncStream<Wake>.Continuation
    }

    private struct Request {
        let id: Int
        let lock: Int64
        let key: String
        let continuation: CheckedContinuation<LockAnswer, any Error>
        let deadline: Task<Void, Never>

        func resume(_ result: Result<LockAnswer, any Error>) {
            deadline.cancel()
            continuation.resume(with: result)
        }
    }

    /// What starts a turn of the statement loop besides what it takes as it goes (see ``execute(_:on:)``).
    private struct Batch {
        var publications: [Publication]
        var keepAlive: Bool
    }

    private struct State {
        var phase = Phase.idle
        var generation = 0
        var lostGeneration = 0
        var readyGeneration = 0
        /// Notifications heard on the channel, in every generation: a step's clock.
        var heard: UInt64 = 0
        var nextID = 0
        var waiters: [Int64: [Int: Waiter]] = [:]
        var pending: [Request] = []
        var inFlight: Set<Int> = []
        /// Requests on their way whose step has given up (cancelled, or out of time), with why.
        var givenUp: [Int: any Error] = [:]
        var unlocks: [(Int64, Release)] = []
        var publications: [Publication] = []
        /// The locks this process's steps hold in this generation, with their keys, for the event
        /// that says a lock was lost.
        var leaders: [Int64: String] = [:]
        var keepAliveDue = false
        var statementSince: (ContinuousClock.Instant, PostgresConnection)?
        var hello: (String, CheckedContinuation<Bool, Never>)?

        var isLeading: Bool { !leaders.isEmpty || !publications.isEmpty }
    }
}

/// A lock request that was on its way when the session ended: ask again.
struct SessionLost: Error {}

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
