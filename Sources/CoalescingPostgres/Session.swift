#if Postgres
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// The one connection of a process that listens on the table's channel and holds its advisory
/// locks: leased from the pool for as long as the coalescer runs, so that a process holds the pool
/// and this one session, whatever the keys in flight.
///
/// This is the storage of a ``SessionStateMachine``: it holds the machine under its one lock, tells
/// it each event, and carries out what it decides after releasing the lock: the statements, the
/// answers, the wakes. It reads the clock before taking the lock and passes the time in.
///
/// Steps never open a connection to wait. A step registers at its arrival (``register(_:)``), and
/// from then on every notification about its key that reaches the session reaches it, in the
/// order the database committed them; `position` counts the notifications heard, so that a step
/// tells what came after it arrived. Its lock requests go out together, one statement for all of
/// them, each taking its key's watch first, so that a leader elsewhere tells this process its
/// result. A step that asks again (a take-over check, a release heard) is answered only after a
/// barrier, the next statement: its grant may follow a result committed just before it, whose
/// notification PostgreSQL sends before it reports the session ready, but which PostgresNIO may
/// hand to the listener after the statement's answer.
///
/// Lock order: `machine` is the only lock here but `attempt`'s, taken after it or alone, and nothing
/// is called while it is held but `AsyncStream.Continuation.yield`, which takes no lock of ours.
final class Session: Sendable {
    typealias Machine = SessionStateMachine<
        PostgresConnection, CheckedContinuation<LockAnswer, any Error>, AsyncStream<Wake>.Continuation
    >

    let configuration: PostgresCoalescerConfiguration
    let recorder: StepRecorder
    let clock: SessionClock
    private let machine: NIOLockedValueBox<Machine>
    /// The attempt to have a session in flight, cancelled by a stop that finds no session: a lease
    /// waits on the pool for as long as the pool cannot connect.
    private let attempt = NIOLockedValueBox<Task<Void, any Error>?>(nil)
    /// Wakes the statement loop: a request, a result, a release or a keep-alive is waiting.
    private let kicks: AsyncStream<Void>
    private let kick: AsyncStream<Void>.Continuation

    init(configuration: PostgresCoalescerConfiguration, recorder: StepRecorder, clock: SessionClock) {
        self.configuration = configuration
        self.recorder = recorder
        self.clock = clock
        machine = NIOLockedValueBox(
            Machine(
                settings: .init(
                    connectTimeout: configuration.connectTimeout, silenceTimeout: configuration.silentSessionTimeout,
                    takeOverInterval: configuration.takeOverInterval, keepAliveInterval: configuration.keepAliveInterval
                )))
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

    func register(_ lock: Int64) -> Registration {
        let (wakes, wake) = AsyncStream.makeStream(of: Wake.self, bufferingPolicy: .bufferingNewest(1))
        let id = machine.withLockedValue { $0.register(lock, waker: wake) }
        return Registration(id: id, lock: lock, wakes: wakes)
    }

    func unregister(_ registration: Registration) {
        switch machine.withLockedValue({ $0.unregister(registration.lock, id: registration.id) }) {
        case .finish(let waker):
            waker?.finish()
        }
    }

    func news(for registration: Registration) -> News {
        machine.withLockedValue { $0.news(registration.lock, id: registration.id) }
    }

    /// Forgets a result that turned out to be gone from the table, so that the step asks again.
    func discardResult(of registration: Registration) {
        machine.withLockedValue { $0.discardResult(registration.lock, id: registration.id) }
    }

    /// Whether the session listens and may take lock requests: a readiness probe's question.
    var isReady: Bool { machine.withLockedValue(\.isReady) }

    /// Asks for the key's lock without waiting for it, after taking the key's watch; a step that
    /// asked before is answered once the notifications committed before the answer have been heard. The request waits for a session when there is none, and
    /// is asked again on the next one when its session is lost, all within its one deadline
    /// (``PostgresCoalescerConfiguration/silentSessionTimeout`` and
    /// ``PostgresCoalescerConfiguration/connectTimeout``).
    ///
    /// - Parameters:
    ///   - lock: The key's lock.
    ///   - key: The key, for the event that says a lock was lost.
    ///   - first: Whether the step asks for the first time.
    /// - Returns: Whether the lock was granted, with the sequence value taken beside it.
    /// - Throws: ``CoalescingPostgresError/databaseUnavailable(_:)`` while no session can be had
    ///   within the configured time, or when the coalescer stops, or when the deadline passes;
    ///   `CancellationError` if the step is cancelled first. A lock granted to a request answered
    ///   meanwhile is released for the others.
    func tryLock(_ lock: Int64, key: String, first: Bool) async throws -> LockAnswer {
        let id = machine.withLockedValue { $0.reserveID() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<LockAnswer, any Error>) in
                let now = clock.now()
                let requested = machine.withLockedValue { machine -> Machine.Requested? in
                    // A cancellation that came before the request was queued found nothing to give up.
                    guard !Task.isCancelled else { return nil }
                    return machine.request(id, lock: lock, key: key, first: first, answerer: continuation, now: now)
                }
                switch requested {
                case nil: continuation.resume(throwing: CancellationError())
                case .queued?: kick.yield()
                case .refused(let answerer, let error)?: answerer.resume(throwing: error)
                }
            }
        } onCancel: {
            let answerer = machine.withLockedValue { $0.giveUp(id) }
            answerer?.resume(throwing: CancellationError())
        }
    }

    /// Ends a leader's run, in one turn of the session with the other leaders' results: announces
    /// its result to the processes waiting for it, if any, then releases its lock. A publication
    /// whose session was lost is still announced, by the next session; its lock went with the old one.
    func endRun(_ publication: Publication) {
        switch machine.withLockedValue({ $0.publish(publication) }) {
        case .queued: kick.yield()
        case .dropped: notPublished([publication], CoalescingPostgresError.databaseUnavailable("the coalescer stopped"))
        }
    }

    /// Releases a lock this step holds, in the session generation that granted it; a lock of a
    /// session that has since been lost is gone already.
    func unlock(_ lock: Int64, _ release: Release, generation: Int) {
        if machine.withLockedValue({ $0.unlock(lock, release, generation: generation) }) { kick.yield() }
    }

    // MARK: - The session's life

    /// Keeps a session open on `client` until `stop` ends it: reconnects after a loss, marks the
    /// database unavailable when no session can be had within the configured time, keeps the
    /// session alive, wakes waiting steps for take-over checks, and sweeps old results.
    func run(client: PostgresClient) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.ticking() }
            group.addTask { await self.sweeping(client) }
            await connectUntilStopped(client)
            group.cancelAll()
        }
    }

    /// Stops taking requests; `draining` lets the steps that lead finish and release their locks
    /// first (a graceful shutdown), otherwise everything ends at once.
    func stop(draining: Bool) {
        let stopped = machine.withLockedValue { $0.stop(draining: draining) }
        for (answerer, error) in stopped.answers { answerer.resume(throwing: error) }
        for waker in stopped.wake { waker.yield(.lost) }
        if stopped.cancelAttempt { attempt.withLockedValue { $0 }?.cancel() }
        kick.yield()
    }

    private func connectUntilStopped(_ client: PostgresClient) async {
        while true {
            let now = clock.now()
            guard case .connect(let generation) = machine.withLockedValue({ $0.startConnecting(now: now) }) else {
                return
            }
            let session = Task { try await client.withConnection { try await self.serve($0, generation: generation) } }
            attempt.withLockedValue { $0 = session }
            // A stop that came before the attempt was recorded did not cancel it.
            if case .stopped = machine.withLockedValue(\.life) { session.cancel() }
            do {
                try await session.value
                return
            } catch {
                switch end(generation, CoalescingPostgresError(error)) {
                case .reconnect(let delay):
                    if delay > .zero { try? await clock.sleep(delay) }
                case .stop:
                    return
                }
            }
        }
    }

    /// Prepares a leased connection as the session, then runs its statements until the coalescer
    /// stops; throws when the session is lost. A session that fails any other way is closed rather
    /// than handed back to the pool with its locks.
    private func serve(_ connection: PostgresConnection, generation: Int) async throws {
        let logger = recorder.logger
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
        let listening = try await connection.addListenerWhileOpen(channel: configuration.table) {
            [weak self] _, notification in
            self?.heard(notification.payload, generation: generation)
        }
        defer { listening.stop() }
        // PostgresNIO sends its own LISTEN without saying when it took effect; this one returns
        // once the session listens, so that no step counts on a notification not yet heard.
        try await connection.perform("LISTEN \(unescaped: quoted(configuration.table))", logger: logger)
        let now = clock.now()
        switch machine.withLockedValue({ $0.connected(generation, connection: connection, now: now) }) {
        case .leave:
            return await leave(connection)
        case .ended:
            throw CoalescingPostgresError.databaseUnavailable("the session's connection closed")
        case .ready(let answeredAgain):
            if answeredAgain { recorder.databaseAnswered() }
        }
        // Only once the machine knows the session, as postgres-nio's pool orders it: a close
        // reported now ends a session it knows, and one that came first is reported at once.
        connection.closeFuture.whenComplete { [weak self] _ in
            self?.end(generation, .databaseUnavailable("the session's connection closed"))
        }
        var kicked = kicks.makeAsyncIterator()
        do {
            while true {
                let now = clock.now()
                switch machine.withLockedValue({ $0.nextStatement(generation, now: now) }) {
                case .finish(let finishes): try await finish(finishes, generation, on: connection)
                case .ask(let asked): try await ask(asked, generation, on: connection)
                case .release(let unlocks): try await release(unlocks, generation, on: connection)
                case .wait: _ = await kicked.next()
                case .leave: return await leave(connection)
                case .lost: throw CoalescingPostgresError.databaseUnavailable("the session's connection closed")
                }
            }
        } catch {
            try? await connection.close().get()
            throw error
        }
    }

    /// The runs that ended in a turn, each in one statement. A result is announced only where a
    /// step waits for it: in another process (which holds the key's watch) or in this one.
    /// Otherwise nobody is told, and the lock goes while the watch is held exclusively, so that a
    /// step that takes the watch meanwhile finds the lock free. A value small enough travels in its
    /// notification; a larger one was written to the table on a pooled connection.
    private func finish(_ finishes: [Machine.Finish], _ generation: Int, on connection: PostgresConnection)
        async throws
    {
        let watches = finishes.map { LockKey.watch($0.publication.lock) }
        var binds = PostgresBindings()
        binds.append(configuration.table)
        do {
            if finishes.count == 1 {
                let finish = finishes[0]
                binds.append(finish.publication.lock)
                binds.append(watches[0].0)
                binds.append(watches[0].1)
                binds.append(finish.holdsLock)
                binds.append(finish.mustTell)
                binds.append(finish.unwatch)
                binds.append(ChannelMessage.announcing(finish.publication))
                try await connection.perform(
                    PostgresQuery(unsafeSQL: "SELECT \(Self.ending(operands: 2...8))", binds: binds),
                    logger: recorder.logger)
            } else {
                binds.append(finishes.map(\.publication.lock))
                binds.append(watches.map(\.0))
                binds.append(watches.map(\.1))
                binds.append(finishes.map(\.holdsLock))
                binds.append(finishes.map(\.mustTell))
                binds.append(finishes.map(\.unwatch))
                binds.append(finishes.map { ChannelMessage.announcing($0.publication) })
                let columns = ["p.k", "p.a", "p.b", "p.held", "p.tell", "p.unwatch", "p.payload"]
                try await connection.perform(
                    PostgresQuery(
                        unsafeSQL: """
                            SELECT \(Self.ending(columns))
                            FROM unnest($2::bigint[], $3::int4[], $4::int4[], $5::bool[], $6::bool[], $7::bool[], $8::text[])
                                WITH ORDINALITY AS p(k, a, b, held, tell, unwatch, payload, n)
                            ORDER BY p.n
                            """, binds: binds), logger: recorder.logger)
            }
        } catch {
            try failed(generation, error)
            return
        }
        answered(generation, .finished)
    }

    /// How a run ends, written once over its operands (the lock, its watch's two keys, whether the
    /// session holds the lock, must tell, lets the watch go, and the announcement; the channel is
    /// `$1`), then the watch's release. The watch is tried before the lock goes and let go after
    /// it, so that no step takes the watch between the two. A run whose watch another session
    /// holds is announced, and its lock goes in the same statement, a moment before the
    /// announcement commits: a step told the result finds the lock free (`pg_notify` returns
    /// `void`, which is not null, so that its branch runs the release). A statement of one row
    /// binds its values directly: PostgreSQL plans it in about half the time of a row of `unnest`.
    private static func ending(operands: ClosedRange<Int>) -> String {
        ending(operands.map { "$\($0)" })
    }

    private static func ending(_ operand: [String]) -> String {
        let (lock, a, b, held, tell, unwatch, payload) = (
            operand[0], operand[1], operand[2], operand[3], operand[4], operand[5], operand[6]
        )
        return """
            CASE WHEN CASE WHEN \(tell) THEN false ELSE pg_try_advisory_lock(\(a), \(b)) END THEN
                    CASE WHEN NOT \(held) THEN pg_advisory_unlock(\(a), \(b))
                        WHEN pg_advisory_unlock(\(lock)) THEN pg_advisory_unlock(\(a), \(b))
                        ELSE pg_advisory_unlock(\(a), \(b)) END
                WHEN pg_notify($1, \(payload)) IS NOT NULL THEN CASE WHEN \(held) THEN pg_advisory_unlock(\(lock)) END
            END,
            CASE WHEN \(unwatch) THEN pg_advisory_unlock_shared(\(a), \(b)) END
            """
    }

    /// The lock requests of a turn, each after its key's watch unless the session holds it:
    /// granted, held, or busy (another session's leader is releasing it) in order.
    private func ask(_ asked: [Machine.Asked], _ generation: Int, on connection: PostgresConnection) async throws {
        let watches = asked.map { LockKey.watch($0.lock) }
        var binds = PostgresBindings()
        binds.append(quoted(configuration.table + "_seq"))
        var grants: [Machine.Grant] = []
        do {
            let rows: [PostgresRow]
            if asked.count == 1 {
                binds.append(asked[0].lock)
                binds.append(asked[0].watch)
                binds.append(watches[0].0)
                binds.append(watches[0].1)
                rows = try await connection.rows(
                    PostgresQuery(
                        unsafeSQL: "SELECT \(Self.trying("$2", "$3", "$4", "$5")), nextval($1::regclass)", binds: binds),
                    logger: recorder.logger)
            } else {
                binds.append(asked.map(\.lock))
                binds.append(asked.map(\.watch))
                binds.append(watches.map(\.0))
                binds.append(watches.map(\.1))
                rows = try await connection.rows(
                    PostgresQuery(
                        unsafeSQL: """
                            SELECT \(Self.trying("l.k", "l.watch", "l.a", "l.b")), nextval($1::regclass)
                            FROM unnest($2::bigint[], $3::bool[], $4::int4[], $5::int4[])
                                WITH ORDINALITY AS l(k, watch, a, b, n)
                            ORDER BY l.n
                            """, binds: binds), logger: recorder.logger)
            }
            for row in rows {
                let (granted, sequence) = try row.decode((Bool?, Int64).self)
                let lock: Machine.Grant.Lock = granted.map { $0 ? .granted : .held } ?? .busy
                grants.append(Machine.Grant(lock: lock, sequence: sequence))
            }
        } catch {
            try failed(generation, error)
            return
        }
        answered(generation, .asked(grants))
    }

    /// A lock request, written once over its operands: the watch first, when the request takes
    /// it; null when the watch is held exclusively (a leader elsewhere is ending its run).
    private static func trying(_ lock: String, _ takesWatch: String, _ a: String, _ b: String) -> String {
        """
        CASE WHEN NOT \(takesWatch) THEN pg_try_advisory_lock(\(lock))
            WHEN pg_try_advisory_lock_shared(\(a), \(b)) THEN pg_try_advisory_lock(\(lock)) END
        """
    }

    /// The releases, in a statement that is also the barrier the grants wait for, and the
    /// keep-alive. A release is told only to a process that waits (holds the key's watch), checked
    /// after the lock is free. Any failure ends the session: the locks it holds are then not known.
    private func release(_ unlocks: [Machine.Unlock], _ generation: Int, on connection: PostgresConnection)
        async throws
    {
        let watches = unlocks.map { LockKey.watch($0.lock) }
        let told = unlocks.map { unlock in
            guard let release = unlock.release, release != .silent else { return "" }
            return ChannelMessage.releasing(unlock.lock, release)
        }
        try await connection.perform(
            """
            SELECT CASE WHEN r.told THEN pg_notify(\(configuration.table), r.payload) IS NULL END,
                CASE WHEN r.unwatch THEN pg_advisory_unlock_shared(r.a, r.b) END
            FROM (
                SELECT u.a, u.b, u.unwatch, u.payload,
                    CASE WHEN u.unlock THEN pg_advisory_unlock(u.k) END AS unlocked,
                    CASE WHEN u.payload = '' THEN false
                        WHEN pg_try_advisory_lock(u.a, u.b) THEN NOT pg_advisory_unlock(u.a, u.b)
                        ELSE true END AS told
                FROM unnest(
                    \(unlocks.map(\.lock))::bigint[], \(unlocks.map { $0.release != nil })::bool[],
                    \(watches.map(\.0))::int4[], \(watches.map(\.1))::int4[], \(unlocks.map(\.unwatch))::bool[],
                    \(told)::text[]
                ) AS u(k, unlock, a, b, unwatch, payload)
                OFFSET 0
            ) AS r
            """, logger: recorder.logger)
        answered(generation, .released)
    }

    /// Releases every lock, stops listening and resets the session, so that the connection goes
    /// back to the pool as it came; closes it if that fails.
    private func leave(_ connection: PostgresConnection) async {
        let logger = recorder.logger
        do {
            try await connection.perform("SELECT pg_advisory_unlock_all()", logger: logger)
            try await connection.perform("UNLISTEN \(unescaped: quoted(configuration.table))", logger: logger)
            try await connection.perform(
                """
                SELECT set_config(name, reset_val, false) FROM pg_settings
                WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout', 'synchronous_commit')
                """, logger: logger)
        } catch {
            try? await connection.close().get()
        }
    }

    private func answered(_ generation: Int, _ reply: Machine.Reply) {
        let now = clock.now()
        carryOut(machine.withLockedValue { $0.answered(generation, reply, now: now) })
    }

    /// A statement that failed: an outage ends the session (rethrown); an error of the database
    /// (a missing sequence, a privilege) reaches the steps, and the session goes on.
    private func failed(_ generation: Int, _ error: any Error) throws {
        let failure = CoalescingPostgresError(error)
        guard !failure.isUnavailable else { throw failure }
        carryOut(machine.withLockedValue { $0.failed(generation, failure) }, failure)
    }

    private func carryOut(_ answered: Machine.Answered, _ cause: CoalescingPostgresError? = nil) {
        for (answerer, result) in answered.answers { answerer.resume(with: result.mapError { $0 }) }
        if let cause { notPublished(answered.notPublished, cause) }
    }

    /// Reports results that no other process will hear: the processes waiting take over.
    func notPublished(_ publications: [Publication], _ cause: CoalescingPostgresError) {
        for publication in publications {
            recorder.logger.warning(
                "could not publish a result; the processes waiting for it will take over",
                metadata: ["key": "\(publication.key.prefix(200))", "error": "\(cause)"])
            recorder.record(.publishFailed(key: publication.key, error: cause.description)) {
                $0.publishFailures += 1
            }
        }
    }

    /// A session of `generation` ended, or an attempt to have one failed.
    @discardableResult
    private func end(_ generation: Int, _ error: CoalescingPostgresError) -> Machine.Ended.Next {
        let now = clock.now()
        let ended = machine.withLockedValue { $0.ended(generation, error, now: now) }
        if ended.lost {
            recorder.logger.warning("the session ended; the coalescer opens another", metadata: ["error": "\(error)"])
        }
        for key in ended.locksLost { recorder.lockLost(key: key, error: error) }
        for waker in ended.wake { waker.yield(.lost) }
        for (answerer, error) in ended.answers { answerer.resume(throwing: error) }
        notPublished(ended.dropped, error)
        kick.yield()
        return ended.next
    }

    /// One notification of the channel.
    private func heard(_ payload: String, generation: Int) {
        let wakers = machine.withLockedValue { $0.heard(ChannelMessage(payload), generation: generation) }
        for waker in wakers { waker.yield(.news) }
    }

    /// Deadlines, the watchdog, keep-alives and take-over checks, each at most a tick late.
    private func ticking() async {
        let interval = min(
            configuration.takeOverInterval, configuration.keepAliveInterval, configuration.connectTimeout / 4,
            configuration.silentSessionTimeout / 4, .milliseconds(100))
        while (try? await clock.sleep(interval)) != nil {
            let now = clock.now()
            let noSession = recorder.noSession(within: configuration.connectTimeout)
            let ticked = machine.withLockedValue { $0.tick(now: now, noSession: noSession) }
            for (answerer, error) in ticked.answers { answerer.resume(throwing: error) }
            if let silent = ticked.close {
                recorder.logger.warning(
                    "the session's statement went unanswered for \(configuration.silentSessionTimeout); closing it")
                silent.close().whenComplete { _ in }
            }
            for waker in ticked.wake { waker.yield(.tick) }
            if ticked.kick { kick.yield() }
        }
    }

    private func sweeping(_ client: PostgresClient) async {
        while (try? await clock.sleep(configuration.resultRetention)) != nil {
            guard isReady else { continue }
            do {
                try await Mailbox(configuration: configuration).sweep(client: client, logger: recorder.logger)
            } catch {
                recorder.logger.notice(
                    "could not sweep old results", metadata: ["error": "\(CoalescingPostgresError(error))"])
            }
        }
    }
}

/// The clock a ``PostgresCoalescer`` runs on: what the session reads as now, a `Duration` since the
/// coalescer was made, and how it waits.
struct SessionClock: Sendable {
    let now: @Sendable () -> Duration
    let sleep: @Sendable (Duration) async throws -> Void

    init<C: Clock>(_ clock: C) where C.Duration == Duration {
        let origin = clock.now
        now = { origin.duration(to: clock.now) }
        sleep = { try await clock.sleep(for: $0) }
    }
}
#endif
