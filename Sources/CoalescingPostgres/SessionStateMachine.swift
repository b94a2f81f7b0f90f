#if Postgres
/// What the ``Session`` decides, with no I/O: the session connection's life, the steps waiting on
/// each lock, the lock requests and their deadlines, the statement the session runs next, and what
/// a tick of time does. The ``Session`` holds it under its lock, calls one method per event, and
/// carries out the action it returns after releasing the lock, as postgres-nio's `ConnectionPool`
/// does with its `PoolStateMachine`.
///
/// Generic over what it carries and never looks into (the connection, what answers a request, what
/// wakes a step), so that a test drives it with plain values, exhaustively, without a database.
/// Time is a `Duration` since the session was made, passed into each event that needs it.
///
/// Slow is not down: a lost session, a refused connection or a slow statement make requests wait
/// for the next session, within their own deadlines; only a database that gives no session within
/// ``Settings/connectTimeout`` is unavailable. A statement is slow, not lost, until
/// ``Settings/silenceTimeout``.
///
/// Who is told what: a step that asks for a key's lock also takes the key's *watch*, a shared
/// advisory lock (``LockKey/watch``), and its session keeps it while a step of the process waits
/// for the key. A leader's result is announced only when another session holds the watch, or a
/// step of its own process waits, and no process hears of a value nobody waits for; either way the
/// run ends in one statement. The order makes this safe: a step takes the watch before it tries
/// the lock, and a leader releases the lock while it holds the watch exclusively, so a step is
/// either counted by the leader or asks after the lock is free. A result heard says the lock is
/// free too: it goes in the statement that announces it, before the announcement commits.
struct SessionStateMachine<Connection, Answerer, Waker> {
    struct Settings: Hashable {
        var connectTimeout: Duration
        /// How long a statement of the session may go unanswered before the session counts as lost.
        var silenceTimeout: Duration
        var takeOverInterval: Duration
        var keepAliveInterval: Duration
        /// How long a lock request may wait for its answer, across sessions: a statement as slow as
        /// the session may be, then a session had again.
        var requestLimit: Duration { silenceTimeout + connectTimeout }
    }

    /// The session connection's life.
    enum Life {
        /// `run()` has not started: requests wait for it, within their deadlines.
        case idle
        /// No session now: one is being had; requests wait for it.
        case connecting(Attempt)
        /// No session could be had within ``Settings/connectTimeout``: requests fail at once until
        /// one is. The attempts go on.
        case down(Attempt, CoalescingPostgresError)
        /// A session that listens on the channel, and the statement it runs.
        case ready(Live)
        /// A graceful shutdown: the steps that lead here finish, publish and release their locks.
        case draining(Live)
        case stopped
    }

    /// The attempts to have a session since the last one was lost (or since `run()`).
    struct Attempt: Hashable {
        /// The generation of the attempt in flight, or of the session last lost.
        var generation: Int
        /// Since when no session could be had.
        var since: Duration
        var failures = 0
        /// Whether an attempt of `generation` is in flight.
        var inFlight = false
        /// Why the last attempt failed: what the callers hear when the database counts as unavailable.
        var cause: CoalescingPostgresError?
    }

    /// A session, its generation, where its statement loop is, and what it holds in the database:
    /// everything here goes with the session.
    struct Live {
        let generation: Int
        let connection: Connection
        var statement = Statement.none
        /// The locks this process's steps hold, with their keys.
        var leaders: [Int64: String] = [:]
        /// The watches this session holds: a step of this process asked for the lock.
        var watched: Set<Int64> = []
        /// Locks and watches to release, and what to tell the others.
        var unlocks: [Unlock] = []
        var keepAliveDue = false
        var lastKeepAlive: Duration
    }

    /// The statement a session runs: its turn goes finish, ask, release. The answer to a step's
    /// first request goes out at once; a step that asks again waits for the release, a barrier
    /// behind which every notification committed before the locks were tried has been heard, so
    /// that it hears a result that came just before its grant. A first refusal needs none: an
    /// earlier run's release heard after it only makes the step ask again, and that answer waits.
    enum Statement: Hashable {
        case none
        case finishing([Finish], since: Duration)
        case asking([Asked], since: Duration)
        /// The lock statement answered: the grants to requests that need the barrier wait for the
        /// release statement.
        case granted([Asked], [Grant])
        case releasing([Asked], [Grant], since: Duration)

        /// Since when the statement running has gone unanswered.
        var since: Duration? {
            switch self {
            case .none, .granted: nil
            case .finishing(_, let since), .asking(_, let since), .releasing(_, _, let since): since
            }
        }
    }

    /// A request on its way: a request answered before its grant comes back (given up, or past its
    /// deadline) is gone from ``requests``, and a lock granted to it is released.
    struct Asked: Hashable {
        var id: Int
        var lock: Int64
        /// Whether the statement takes the key's watch before it tries the lock.
        var watch: Bool
    }

    /// What the database answered one request.
    struct Grant: Hashable {
        enum Lock: Hashable {
            case granted
            case held
            /// Another session's leader was releasing the lock, holding its watch: ask again.
            case busy
        }

        var lock: Lock
        var sequence: Int64
    }

    struct Request {
        let lock: Int64
        let key: String
        let answerer: Answerer
        let deadline: Duration
        /// Whether its step asked before: its answer waits for the barrier (see ``Statement``).
        let needsBarrier: Bool
        /// The generation of the session it was sent on, or nil while it waits for one.
        var sent: Int? = nil
    }

    struct Waiter {
        var news = News()
        let waker: Waker
    }

    /// A leader's result, with how its statement ends the run.
    struct Finish: Hashable {
        var publication: Publication
        /// Whether this session still holds the lock (a result of a lost session is only told).
        var holdsLock: Bool
        /// A step of this process waits on the lock: tell, whoever else waits.
        var mustTell: Bool
        /// No step of this process needs the watch any more: release it.
        var unwatch: Bool
    }

    let settings: Settings
    private(set) var life = Life.idle
    /// Notifications heard on the channel, in every generation: a step's clock.
    private(set) var heard: UInt64 = 0
    private var nextID = 0
    private(set) var waiters: [Int64: [Int: Waiter]] = [:]
    private(set) var requests: [Int: Request] = [:]
    private(set) var publications: [Publication] = []
    private var lastTakeOverCheck = Duration.zero

    init(settings: Settings) {
        self.settings = settings
    }

    var isReady: Bool {
        if case .ready = life { return true }
        return false
    }

    /// The live session, ready or draining.
    var live: Live? {
        switch life {
        case .ready(let live), .draining(let live): live
        case .idle, .connecting, .down, .stopped: nil
        }
    }

    /// What a release statement does to one lock.
    struct Unlock: Hashable {
        var lock: Int64
        /// Nil when only the watch goes.
        var release: Release?
        var unwatch = false
    }

    // MARK: - Steps

    mutating func register(_ lock: Int64, waker: Waker) -> Int {
        nextID += 1
        waiters[lock, default: [:]][nextID] = Waiter(waker: waker)
        return nextID
    }

    enum Unregistered {
        /// The step's waker, to finish.
        case finish(Waker?)
    }

    mutating func unregister(_ lock: Int64, id: Int) -> Unregistered {
        let waiter = waiters[lock]?.removeValue(forKey: id)
        if waiters[lock]?.isEmpty == true { waiters[lock] = nil }
        unwatchIfIdle(lock)
        return .finish(waiter?.waker)
    }

    func news(_ lock: Int64, id: Int) -> News {
        waiters[lock]?[id]?.news ?? News()
    }

    mutating func discardResult(_ lock: Int64, id: Int) {
        waiters[lock]?[id]?.news.result = nil
    }

    enum Requested {
        /// Queued for the statement loop.
        case queued
        case refused(Answerer, CoalescingPostgresError)
    }

    /// An id for a request to come, so that its step can give it up before it is queued.
    mutating func reserveID() -> Int {
        nextID += 1
        return nextID
    }

    /// A lock request, answered within ``Settings/requestLimit`` from now; `first` when its step
    /// has not asked before.
    mutating func request(_ id: Int, lock: Int64, key: String, first: Bool, answerer: Answerer, now: Duration)
        -> Requested
    {
        switch life {
        case .down(_, let error):
            return .refused(answerer, error)
        case .draining, .stopped:
            return .refused(answerer, Self.shuttingDown)
        case .idle, .connecting, .ready:
            requests[id] = Request(
                lock: lock, key: key, answerer: answerer, deadline: now + settings.requestLimit, needsBarrier: !first)
            return .queued
        }
    }

    /// A step that stopped waiting for its answer (cancelled): answered now, whether its request
    /// was sent or not; a lock granted to it later is released.
    mutating func giveUp(_ id: Int) -> Answerer? {
        requests.removeValue(forKey: id)?.answerer
    }

    enum Published {
        case queued
        /// The coalescer has stopped: nothing will publish it.
        case dropped
    }

    mutating func publish(_ publication: Publication) -> Published {
        switch life {
        case .stopped: return .dropped
        case .idle, .connecting, .down, .ready, .draining:
            publications.append(publication)
            return .queued
        }
    }

    /// Whether the release was queued: a lock of a session since lost is gone already.
    mutating func unlock(_ lock: Int64, _ release: Release, generation: Int) -> Bool {
        guard var live = liveSession(generation) else { return false }
        if release != .silent { live.leaders[lock] = nil }
        live.unlocks.append(Unlock(lock: lock, release: release))
        store(live)
        unwatchIfIdle(lock)
        return true
    }

    /// Queues the release of the lock's watch when no step of this process needs it: none waits on
    /// the lock, leads it, or has a request for it. It goes with the session's next release
    /// statement, the keep-alive at the latest, not in a statement of its own: a process that
    /// waited for a hot key would otherwise pay a commit a run for it, and a key asked again
    /// meanwhile keeps its watch. Kept that long, it costs a leader elsewhere a notification.
    private mutating func unwatchIfIdle(_ lock: Int64) {
        guard var live, live.watched.contains(lock), waiters[lock] == nil, live.leaders[lock] == nil,
            !requests.values.contains(where: { $0.lock == lock })
        else { return }
        live.watched.remove(lock)
        live.unlocks.append(Unlock(lock: lock, release: nil, unwatch: true))
        store(live)
    }

    /// The steps to wake: those waiting on the notification's lock. A notification of the session
    /// being had counts too: PostgresNIO listens before the session is ready.
    mutating func heard(_ notification: ChannelMessage, generation: Int) -> [Waker] {
        switch life {
        case .ready(let live), .draining(let live):
            guard live.generation == generation else { return [] }
        case .connecting(let attempt), .down(let attempt, _):
            guard attempt.generation == generation, attempt.inFlight else { return [] }
        case .idle, .stopped:
            return []
        }
        heard += 1
        let lock: Int64
        switch notification {
        case .other: return []
        case .result(let locked, _, _, _), .released(let locked, _): lock = locked
        }
        guard var onLock = waiters[lock] else { return [] }
        for (id, var waiter) in onLock {
            switch notification {
            case .released(_, let published):
                waiter.news.release = News.ReleaseHeard(published: published, position: heard)
            case .result(_, let sequence, let started, let inline):
                // Announced in the statement that released the lock: a step that cannot take the
                // result (another key's, or too old for a forgetting step) asks for the lock again.
                waiter.news.release = News.ReleaseHeard(published: true, position: heard)
                guard sequence > waiter.news.result?.sequence ?? .min else { break }
                waiter.news.result = Heard(sequence: sequence, started: started, position: heard, inline: inline)
            case .other:
                continue
            }
            onLock[id] = waiter
        }
        waiters[lock] = onLock
        return onLock.values.map(\.waker)
    }

    // MARK: - Time

    /// What a tick does.
    struct Ticked {
        /// Requests past their deadlines, and those refused because no session could be had.
        var answers: [(Answerer, CoalescingPostgresError)] = []
        /// A session whose statement has gone unanswered for ``Settings/silenceTimeout``: close it.
        var close: Connection?
        /// Waiting steps, to ask for their locks again: a leader that died says nothing.
        var wake: [Waker] = []
        /// A keep-alive is due: wake the statement loop.
        var kick = false
    }

    /// Time passed: `noSession` is what the callers hear if no session could be had for
    /// ``Settings/connectTimeout`` and no attempt said why.
    mutating func tick(now: Duration, noSession: CoalescingPostgresError) -> Ticked {
        var ticked = Ticked()
        for (id, request) in requests where request.deadline <= now {
            requests[id] = nil
            ticked.answers.append((request.answerer, .databaseUnavailable("no answer within \(settings.requestLimit)")))
        }
        if now - lastTakeOverCheck >= settings.takeOverInterval {
            lastTakeOverCheck = now
            ticked.wake = waiters.values.flatMap { $0.values.map(\.waker) }
        }
        switch life {
        case .idle, .down, .stopped:
            break
        case .connecting(let attempt):
            guard now - attempt.since >= settings.connectTimeout else { break }
            let error = attempt.cause ?? noSession
            life = .down(attempt, error)
            ticked.answers += refuseWaiting(error)
        case .ready(var live), .draining(var live):
            if let since = live.statement.since, now - since >= settings.silenceTimeout {
                ticked.close = live.connection
            }
            if now - live.lastKeepAlive >= settings.keepAliveInterval {
                live.lastKeepAlive = now
                live.keepAliveDue = true
                ticked.kick = true
                store(live)
            }
        }
        return ticked
    }

    /// Answers every request that waits for a session with `error`.
    private mutating func refuseWaiting(_ error: CoalescingPostgresError) -> [(Answerer, CoalescingPostgresError)] {
        var answers: [(Answerer, CoalescingPostgresError)] = []
        for (id, request) in requests.sorted(by: { $0.key < $1.key }) where request.sent == nil {
            requests[id] = nil
            answers.append((request.answerer, error))
        }
        return answers
    }

    // MARK: - The session's life

    enum ConnectStart: Equatable {
        case connect(generation: Int)
        case stop
    }

    mutating func startConnecting(now: Duration) -> ConnectStart {
        switch life {
        case .idle:
            life = .connecting(Attempt(generation: 1, since: now, inFlight: true))
            return .connect(generation: 1)
        case .connecting(var attempt):
            attempt.generation += 1
            attempt.inFlight = true
            life = .connecting(attempt)
            return .connect(generation: attempt.generation)
        case .down(var attempt, let error):
            attempt.generation += 1
            attempt.inFlight = true
            life = .down(attempt, error)
            return .connect(generation: attempt.generation)
        case .ready, .draining:
            preconditionFailure("a session was asked for while one is live")
        case .stopped:
            return .stop
        }
    }

    enum Connected {
        /// The session is ready; `answeredAgain` when the database had been unavailable. Only now
        /// may the storage watch for the connection's close: every close it reports then ends a
        /// session the machine knows.
        case ready(answeredAgain: Bool)
        /// The coalescer stopped meanwhile: give the connection back.
        case leave
        /// The attempt ended before it connected (its end was told first): end this one too.
        case ended
    }

    /// The session listens on the channel: requests may go out.
    mutating func connected(_ generation: Int, connection: Connection, now: Duration) -> Connected {
        let wasDown: Bool
        switch life {
        case .connecting(let attempt) where attempt.generation == generation && attempt.inFlight:
            wasDown = false
        case .down(let attempt, _) where attempt.generation == generation && attempt.inFlight:
            wasDown = true
        case .stopped:
            return .leave
        case .connecting, .down:
            return .ended
        case .idle, .ready, .draining:
            preconditionFailure("a session connected that was not being had")
        }
        life = .ready(Live(generation: generation, connection: connection, lastKeepAlive: now))
        return .ready(answeredAgain: wasDown)
    }

    /// What follows the end of a session or of an attempt to have one.
    struct Ended {
        /// Locks this process's steps held in the session, by key: reported lost, once.
        var locksLost: [String] = []
        /// Every waiting step: to ask again, on the next session.
        var wake: [Waker] = []
        var answers: [(Answerer, CoalescingPostgresError)] = []
        /// Results no session will publish (the coalescer stopped): reported as not published.
        var dropped: [Publication] = []
        /// Whether a live session was lost, rather than an attempt failed.
        var lost = false
        var next = Next.stop

        enum Next: Equatable {
            case reconnect(after: Duration)
            case stop
        }
    }

    /// A session of `generation` ended (lost, closed, or never had): the locks it held are gone,
    /// and its requests wait for the next session, within their deadlines.
    mutating func ended(_ generation: Int, _ error: CoalescingPostgresError, now: Duration) -> Ended {
        var ended = Ended()
        switch life {
        case .ready(let live) where live.generation == generation:
            ended = lose(live)
            life = .connecting(Attempt(generation: generation, since: now))
            ended.next = .reconnect(after: .zero)
        case .draining(let live) where live.generation == generation:
            // Shutting down: no next session; what was to be published here, is not.
            ended = lose(live)
            ended.dropped = publications
            publications = []
            ended.answers += refuseWaiting(Self.shuttingDown)
            life = .stopped
        case .connecting(var attempt) where attempt.generation == generation && attempt.inFlight:
            attempt.inFlight = false
            attempt.failures += 1
            attempt.cause = error
            ended.next = .reconnect(after: Self.backoff(attempt.failures))
            if now - attempt.since >= settings.connectTimeout {
                life = .down(attempt, error)
                ended.answers = refuseWaiting(error)
            } else {
                life = .connecting(attempt)
            }
        case .down(var attempt, _) where attempt.generation == generation && attempt.inFlight:
            attempt.inFlight = false
            attempt.failures += 1
            life = .down(attempt, error)
            ended.next = .reconnect(after: Self.backoff(attempt.failures))
        case .connecting, .down:
            // The same end told twice (the connection's close, then its statement's error).
            ended.next = .reconnect(after: .zero)
        case .stopped:
            break
        case .idle, .ready, .draining:
            // An end of an older session told late (its connection's close): the live one is not
            // concerned. The statement loop never tells an old end: it runs one session at a time.
            break
        }
        return ended
    }

    /// A live session's end, for its steps: what it held went with it.
    private mutating func lose(_ live: Live) -> Ended {
        var ended = Ended()
        ended.lost = true
        ended.locksLost = live.leaders.values.sorted()
        ended.wake = waiters.values.flatMap { $0.values.map(\.waker) }
        for (id, request) in requests where request.sent != nil {
            requests[id]?.sent = nil
        }
        return ended
    }

    private static func backoff(_ failures: Int) -> Duration {
        .milliseconds(50 * (1 << min(failures - 1, 5)))
    }

    static var shuttingDown: CoalescingPostgresError { .databaseUnavailable("the coalescer is shutting down") }

    /// What a stop does at once.
    struct Stopped {
        var answers: [(Answerer, CoalescingPostgresError)] = []
        /// Every waiting step, to end the same way.
        var wake: [Waker] = []
        /// No session was live: an attempt to have one may wait on the pool for long, and ends now.
        var cancelAttempt = false
    }

    /// Stops taking requests; `draining` lets the steps that lead finish and release their locks
    /// first, otherwise everything ends at once. Every request is answered now.
    mutating func stop(draining: Bool) -> Stopped {
        var stopped = Stopped()
        for (_, request) in requests.sorted(by: { $0.key < $1.key }) {
            stopped.answers.append((request.answerer, Self.shuttingDown))
        }
        requests = [:]
        stopped.wake = waiters.values.flatMap { $0.values.map(\.waker) }
        switch life {
        case .ready(let live) where draining && (!live.leaders.isEmpty || !publications.isEmpty):
            life = .draining(live)
        case .draining where draining:
            break
        case .ready, .draining, .stopped:
            life = .stopped
        case .idle, .connecting, .down:
            life = .stopped
            stopped.cancelAttempt = true
        }
        return stopped
    }

    // MARK: - The statement loop

    /// The next statement of the session of `generation`.
    enum Next: Hashable {
        /// Runs to end: each result announced to whoever waits, and its lock released.
        case finish([Finish])
        /// Locks to ask for, in this order, each after its watch where it is taken.
        case ask([Asked])
        /// Locks and watches to release, telling those who wait how; the barrier the grants wait
        /// for, and the keep-alive.
        case release([Unlock])
        /// Nothing to do: wait for a kick.
        case wait
        /// The coalescer stopped: release every lock, reset the session and give it back.
        case leave
        /// This session was lost: end its loop.
        case lost
    }

    mutating func nextStatement(_ generation: Int, now: Duration) -> Next {
        var live: Live
        let draining: Bool
        switch life {
        case .ready(let current) where current.generation == generation:
            (live, draining) = (current, false)
        case .draining(let current) where current.generation == generation:
            (live, draining) = (current, true)
        case .stopped:
            return .leave
        case .idle, .connecting, .down, .ready, .draining:
            return .lost
        }
        let next: Next
        let waiting = requests.filter { $0.value.sent == nil }.sorted { $0.key < $1.key }
        switch live.statement {
        case .granted(let asked, let grants):
            live.statement = .releasing(asked, grants, since: now)
            next = .release(live.unlocks)
            live.unlocks = []
            live.keepAliveDue = false
        case .finishing, .asking, .releasing:
            preconditionFailure("a statement was asked for while one runs")
        case .none where !publications.isEmpty:
            var finishes: [Finish] = []
            for publication in publications {
                let lock = publication.lock
                let holds = publication.generation == generation && live.leaders[lock] != nil
                let idle = waiters[lock] == nil && !requests.values.contains(where: { $0.lock == lock })
                let unwatch = live.watched.contains(lock) && idle
                if unwatch { live.watched.remove(lock) }
                finishes.append(
                    Finish(publication: publication, holdsLock: holds, mustTell: waiters[lock] != nil, unwatch: unwatch)
                )
            }
            live.statement = .finishing(finishes, since: now)
            next = .finish(finishes)
            publications = []
        case .none where !waiting.isEmpty:
            var asked: [Asked] = []
            // One request per lock in a statement: the next one asks after the first took the watch.
            for (id, request) in waiting where !asked.contains(where: { $0.lock == request.lock }) {
                requests[id]?.sent = generation
                // A watch about to be let go is kept instead.
                if let unwatch = live.unlocks.firstIndex(of: Unlock(lock: request.lock, release: nil, unwatch: true)) {
                    live.unlocks.remove(at: unwatch)
                    live.watched.insert(request.lock)
                }
                asked.append(Asked(id: id, lock: request.lock, watch: !live.watched.contains(request.lock)))
            }
            live.statement = .asking(asked, since: now)
            next = .ask(asked)
        case .none where live.keepAliveDue || live.unlocks.contains(where: { $0.release != nil }):
            live.statement = .releasing([], [], since: now)
            next = .release(live.unlocks)
            live.unlocks = []
            live.keepAliveDue = false
        case .none where draining && live.leaders.isEmpty:
            life = .stopped
            return .leave
        case .none:
            return .wait
        }
        life = draining ? .draining(live) : .ready(live)
        return next
    }

    /// What the database answered a statement.
    enum Reply: Hashable {
        /// The runs ended: their results told to whoever waits, their locks released.
        case finished
        case asked([Grant])
        case released
    }

    /// What follows a statement's answer.
    struct Answered {
        /// Each request's answer.
        var answers: [(Answerer, Result<LockAnswer, CoalescingPostgresError>)] = []
        /// The results of a publication that failed: reported, and their locks released for a
        /// take-over.
        var notPublished: [Publication] = []
    }

    /// The statement of `generation` answered.
    mutating func answered(_ generation: Int, _ reply: Reply, now: Duration) -> Answered {
        var answered = Answered()
        guard var live = liveSession(generation) else { return answered }
        switch (live.statement, reply) {
        case (.finishing(let finishes, _), .finished):
            for finish in finishes where finish.holdsLock {
                live.leaders[finish.publication.lock] = nil
            }
            live.statement = .none
        case (.asking(let asked, _), .asked(let grants)):
            precondition(grants.count == asked.count, "a lock statement answered another number of locks")
            var barrier: [(Asked, Grant)] = []
            for (request, grant) in zip(asked, grants) {
                if request.watch, grant.lock != .busy { live.watched.insert(request.lock) }
                if grant.lock != .busy, requests[request.id]?.needsBarrier == true {
                    barrier.append((request, grant))
                } else if grant.lock == .busy, requests[request.id] != nil {
                    requests[request.id]?.sent = nil
                } else {
                    answered.answers += answer([(request, grant)], live: &live)
                }
            }
            // The barrier: the release statement, which follows a grant that waits for it.
            live.statement = barrier.isEmpty ? .none : .granted(barrier.map(\.0), barrier.map(\.1))
        case (.releasing(let asked, let grants, _), .released):
            answered.answers = answer(Array(zip(asked, grants)), live: &live)
            live.statement = .none
        case (.none, _), (.granted, _), (.finishing, _), (.asking, _), (.releasing, _):
            preconditionFailure("an answer came to no statement, or to another one")
        }
        store(live)
        // A run that ended, or a request answered after its step left, may leave a watch unneeded.
        for lock in live.watched { unwatchIfIdle(lock) }
        return answered
    }

    /// The statement of `generation` failed with an error of the database that is not an outage
    /// (a missing sequence, a privilege): its requests hear it; results are not published.
    mutating func failed(_ generation: Int, _ error: CoalescingPostgresError) -> Answered {
        var answered = Answered()
        guard var live = liveSession(generation) else { return answered }
        switch live.statement {
        case .none, .granted:
            preconditionFailure("a failure came to no statement")
        case .finishing(let finishes, _):
            answered.notPublished = finishes.map(\.publication)
            for finish in finishes {
                // The statement's work is undone or unknown: its watches are let go again below.
                if finish.unwatch { live.watched.insert(finish.publication.lock) }
                guard finish.holdsLock else { continue }
                live.leaders[finish.publication.lock] = nil
                live.unlocks.append(Unlock(lock: finish.publication.lock, release: .abandoned))
            }
        case .releasing:
            preconditionFailure("a release that fails ends the session: the locks it held are not known")
        case .asking(let asked, _):
            for request in asked {
                guard let answerer = requests.removeValue(forKey: request.id)?.answerer else { continue }
                answered.answers.append((answerer, .failure(error)))
            }
        }
        live.statement = .none
        store(live)
        for lock in live.watched { unwatchIfIdle(lock) }
        return answered
    }

    /// The answers to granted or refused requests. A second lock on a key this process already
    /// leads (two keys whose locks collide) is released at once and answered as held; a lock
    /// granted to a request answered meanwhile, or while draining, is released for the others.
    private mutating func answer(_ replies: [(Asked, Grant)], live: inout Live)
        -> [(Answerer, Result<LockAnswer, CoalescingPostgresError>)]
    {
        var answers: [(Answerer, Result<LockAnswer, CoalescingPostgresError>)] = []
        let draining = if case .draining = life { true } else { false }
        for (request, grant) in replies {
            let waiting = requests.removeValue(forKey: request.id)
            var acquired = grant.lock == .granted
            if acquired, waiting == nil || draining {
                live.unlocks.append(Unlock(lock: request.lock, release: .abandoned))
                acquired = false
            } else if acquired, live.leaders[request.lock] != nil {
                live.unlocks.append(Unlock(lock: request.lock, release: .silent))
                acquired = false
            }
            guard let waiting else { continue }
            if draining {
                answers.append((waiting.answerer, .failure(Self.shuttingDown)))
                continue
            }
            if acquired { live.leaders[request.lock] = waiting.key }
            let answer = LockAnswer(
                acquired: acquired, sequence: grant.sequence, position: heard, generation: live.generation)
            answers.append((waiting.answerer, .success(answer)))
        }
        return answers
    }

    private func liveSession(_ generation: Int) -> Live? {
        guard let live, live.generation == generation else { return nil }
        return live
    }

    private mutating func store(_ live: Live) {
        switch life {
        case .ready: life = .ready(live)
        case .draining: life = .draining(live)
        case .idle, .connecting, .down, .stopped: preconditionFailure("a live session stored after its end")
        }
    }
}

extension SessionStateMachine: Sendable where Connection: Sendable, Answerer: Sendable, Waker: Sendable {}
extension SessionStateMachine.Life: Sendable where Connection: Sendable {}
extension SessionStateMachine.Live: Sendable where Connection: Sendable {}
extension SessionStateMachine.Request: Sendable where Answerer: Sendable {}
extension SessionStateMachine.Waiter: Sendable where Waker: Sendable {}

// The explorer compares states: equal machines are one state.
extension SessionStateMachine: Equatable where Connection: Hashable, Answerer: Hashable, Waker: Hashable {}
extension SessionStateMachine: Hashable where Connection: Hashable, Answerer: Hashable, Waker: Hashable {}
extension SessionStateMachine.Life: Equatable where Connection: Hashable {}
extension SessionStateMachine.Life: Hashable where Connection: Hashable {}
extension SessionStateMachine.Live: Equatable where Connection: Hashable {}
extension SessionStateMachine.Live: Hashable where Connection: Hashable {}
extension SessionStateMachine.Request: Equatable where Answerer: Hashable {}
extension SessionStateMachine.Request: Hashable where Answerer: Hashable {}
extension SessionStateMachine.Waiter: Equatable where Waker: Hashable {}
extension SessionStateMachine.Waiter: Hashable where Waker: Hashable {}

/// A lock request's answer: for a step that asked before, once every notification committed
/// before it has been heard.
struct LockAnswer: Sendable, Hashable {
    var acquired: Bool
    /// `nextval` of the table's sequence, taken with the lock: a run's start, and the line a
    /// forgetting step's run must start after.
    var sequence: Int64
    var position: UInt64
    var generation: Int
}

/// What a leader's release tells the others.
enum Release: String, Sendable, Hashable {
    /// A result for the key was published before the lock was released.
    case published
    /// The leader gave up without a result: a waiting process takes over.
    case abandoned
    /// A second lock of this process on a key it already leads: no one is told.
    case silent
}

/// The latest result and the latest release of a key heard after a step arrived.
struct News: Sendable, Hashable {
    var result: Heard?
    var release: ReleaseHeard?

    struct ReleaseHeard: Sendable, Hashable {
        var published: Bool
        var position: UInt64
    }
}

/// A result heard on the channel; `inline` holds the key (in hex) and the value, when the value
/// was small enough to travel in the notification.
struct Heard: Sendable, Hashable {
    var sequence: Int64
    var started: Int64
    var position: UInt64
    var inline: Inline?

    struct Inline: Sendable, Hashable {
        var key: Substring
        var json: Substring
    }
}
#endif
