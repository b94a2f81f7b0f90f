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

    /// A session, its generation, and where its statement loop is.
    struct Live {
        let generation: Int
        let connection: Connection
        var statement: Statement
    }

    /// The statement a session runs: its turn goes publish, ask, release; the answers to the lock
    /// requests wait for the release, a barrier behind which every notification committed before
    /// the locks were granted has been heard.
    enum Statement: Hashable {
        case none
        case publishing([Publication], since: Duration)
        case asking([Asked], since: Duration)
        /// The lock statement answered: its answers wait for the release statement.
        case granted([Asked], [Grant])
        case releasing([Asked], [Grant], since: Duration)

        /// Since when the statement running has gone unanswered.
        var since: Duration? {
            switch self {
            case .none, .granted: nil
            case .publishing(_, let since), .asking(_, let since), .releasing(_, _, let since): since
            }
        }
    }

    /// A request on its way, by id and lock: a request answered before its grant comes back (given
    /// up, or past its deadline) is gone from ``requests``, and a lock granted to it is released.
    struct Asked: Hashable {
        var id: Int
        var lock: Int64
    }

    /// What the database answered one request.
    struct Grant: Hashable {
        var granted: Bool
        var sequence: Int64
    }

    struct Request {
        let lock: Int64
        let key: String
        let answerer: Answerer
        let deadline: Duration
        /// The generation of the session it was sent on, or nil while it waits for one.
        var sent: Int? = nil
    }

    struct Waiter {
        var news = News()
        let waker: Waker
    }

    let settings: Settings
    private(set) var life = Life.idle
    /// Notifications heard on the channel, in every generation: a step's clock.
    private(set) var heard: UInt64 = 0
    private var nextID = 0
    private(set) var waiters: [Int64: [Int: Waiter]] = [:]
    private(set) var requests: [Int: Request] = [:]
    /// The locks this process's steps hold in the live session, with their keys.
    private(set) var leaders: [Int64: String] = [:]
    private(set) var unlocks: [Unlock] = []
    private(set) var publications: [Publication] = []
    private var keepAliveDue = false
    private var lastKeepAlive = Duration.zero
    private var lastTakeOverCheck = Duration.zero

    init(settings: Settings) {
        self.settings = settings
    }

    var isReady: Bool {
        if case .ready = life { return true }
        return false
    }

    /// Whether a step of this process holds a lock or has a result to publish.
    private var isLeading: Bool { !leaders.isEmpty || !publications.isEmpty }

    /// A lock to release, and what to tell the others.
    struct Unlock: Hashable {
        var lock: Int64
        var release: Release
    }

    // MARK: - Steps

    mutating func register(_ lock: Int64, waker: Waker) -> Int {
        nextID += 1
        waiters[lock, default: [:]][nextID] = Waiter(waker: waker)
        return nextID
    }

    /// The step's waker, to finish.
    mutating func unregister(_ lock: Int64, id: Int) -> Waker? {
        let waiter = waiters[lock]?.removeValue(forKey: id)
        if waiters[lock]?.isEmpty == true { waiters[lock] = nil }
        return waiter?.waker
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

    /// A lock request, answered within ``Settings/requestLimit`` from now.
    mutating func request(_ id: Int, lock: Int64, key: String, answerer: Answerer, now: Duration) -> Requested {
        switch life {
        case .down(_, let error):
            return .refused(answerer, error)
        case .draining, .stopped:
            return .refused(answerer, Self.shuttingDown)
        case .idle, .connecting, .ready:
            requests[id] = Request(lock: lock, key: key, answerer: answerer, deadline: now + settings.requestLimit)
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
        switch life {
        case .ready(let live), .draining(let live):
            guard live.generation == generation else { return false }
            if release != .silent { leaders[lock] = nil }
            unlocks.append(Unlock(lock: lock, release: release))
            return true
        case .idle, .connecting, .down, .stopped:
            return false
        }
    }

    /// One notification of the channel, parsed.
    enum Notification: Hashable {
        case result(lock: Int64, sequence: Int64, started: Int64, inline: Heard.Inline?)
        case released(lock: Int64, published: Bool)
        case other
    }

    /// The steps to wake: those waiting on the notification's lock.
    mutating func heard(_ notification: Notification, generation: Int) -> [Waker] {
        switch life {
        case .ready(let live), .draining(let live):
            guard live.generation == generation else { return [] }
        case .idle, .connecting, .down, .stopped:
            // A notification of a session already lost: what it said, the next session's requests learn.
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
                guard sequence > waiter.news.result?.sequence ?? .min else { continue }
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
        case .ready(let live), .draining(let live):
            if let since = live.statement.since, now - since >= settings.silenceTimeout {
                ticked.close = live.connection
            }
            if now - lastKeepAlive >= settings.keepAliveInterval {
                lastKeepAlive = now
                keepAliveDue = true
                ticked.kick = true
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
        /// The session is ready; `answeredAgain` when the database had been unavailable.
        case ready(answeredAgain: Bool)
        /// The coalescer stopped meanwhile: give the connection back.
        case leave
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
        case .idle, .connecting, .down, .ready, .draining:
            preconditionFailure("a session connected that was not being had")
        }
        life = .ready(Live(generation: generation, connection: connection, statement: .none))
        lastKeepAlive = now
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
            ended = lose()
            life = .connecting(Attempt(generation: generation, since: now))
            ended.next = .reconnect(after: .zero)
        case .draining(let live) where live.generation == generation:
            // Shutting down: no next session; what was to be published here, is not.
            ended = lose()
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

    /// A live session's end, for its steps.
    private mutating func lose() -> Ended {
        var ended = Ended()
        ended.lost = true
        ended.locksLost = leaders.values.sorted()
        ended.wake = waiters.values.flatMap { $0.values.map(\.waker) }
        leaders = [:]
        unlocks = []
        keepAliveDue = false
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
        case .ready(let live) where draining && isLeading:
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
        /// Results to publish, each with its notification.
        case publish([Publication])
        /// Locks to ask for, in this order.
        case ask([Int64])
        /// Locks to release, telling the others how; the barrier the lock answers wait for, and
        /// the keep-alive.
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
        if case .granted(let asked, let grants) = live.statement {
            live.statement = .releasing(asked, grants, since: now)
            next = .release(unlocks)
            unlocks = []
            keepAliveDue = false
        } else if live.statement != .none {
            preconditionFailure("a statement was asked for while one runs")
        } else if !publications.isEmpty {
            live.statement = .publishing(publications, since: now)
            next = .publish(publications)
            publications = []
        } else if !waiting.isEmpty {
            var asked: [Asked] = []
            for (id, request) in waiting {
                requests[id]?.sent = generation
                asked.append(Asked(id: id, lock: request.lock))
            }
            live.statement = .asking(asked, since: now)
            next = .ask(asked.map(\.lock))
        } else if !unlocks.isEmpty || keepAliveDue {
            live.statement = .releasing([], [], since: now)
            next = .release(unlocks)
            unlocks = []
            keepAliveDue = false
        } else if draining, !isLeading {
            life = .stopped
            return .leave
        } else {
            return .wait
        }
        life = draining ? .draining(live) : .ready(live)
        return next
    }

    /// What follows a statement's answer.
    struct Answered {
        /// Each request's answer.
        var answers: [(Answerer, Result<LockAnswer, CoalescingPostgresError>)] = []
        /// The results of a publication that failed: reported, and their locks released for a
        /// take-over.
        var notPublished: [Publication] = []
    }

    /// The statement of `generation` answered: `grants` for a lock request, in its order.
    mutating func answered(_ generation: Int, grants: [Grant] = [], now: Duration) -> Answered {
        var answered = Answered()
        guard var live = liveSession(generation) else { return answered }
        switch live.statement {
        case .none, .granted:
            preconditionFailure("an answer came to no statement")
        case .publishing(let published, _):
            release(published, generation, as: .published)
            live.statement = .none
        case .asking(let asked, _):
            precondition(grants.count == asked.count, "a lock statement answered another number of locks")
            // The answers wait for a barrier: the release statement, which always follows a grant.
            if grants.contains(where: \.granted) || !unlocks.isEmpty || keepAliveDue {
                live.statement = .granted(asked, grants)
                store(live)
                return answered
            }
            answered.answers = answer(asked, grants, generation: generation)
            live.statement = .none
        case .releasing(let asked, let grants, _):
            answered.answers = answer(asked, grants, generation: generation)
            live.statement = .none
        }
        store(live)
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
        case .publishing(let published, _):
            answered.notPublished = published
            release(published, generation, as: .abandoned)
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
        return answered
    }

    /// The release statement of a lock statement answered: the answers go out. A second lock on a
    /// key this process already leads (two keys whose locks collide) is released at once and
    /// answered as held; a lock granted to a request answered meanwhile, or while draining, is
    /// released for the others.
    private mutating func answer(_ asked: [Asked], _ grants: [Grant], generation: Int)
        -> [(Answerer, Result<LockAnswer, CoalescingPostgresError>)]
    {
        var answers: [(Answerer, Result<LockAnswer, CoalescingPostgresError>)] = []
        let draining = if case .draining = life { true } else { false }
        for (request, grant) in zip(asked, grants) {
            let waiting = requests.removeValue(forKey: request.id)
            var acquired = grant.granted
            if grant.granted, waiting == nil || draining {
                unlocks.append(Unlock(lock: request.lock, release: .abandoned))
                acquired = false
            } else if grant.granted, leaders[request.lock] != nil {
                unlocks.append(Unlock(lock: request.lock, release: .silent))
                acquired = false
            }
            guard let waiting else { continue }
            if draining {
                answers.append((waiting.answerer, .failure(Self.shuttingDown)))
                continue
            }
            if acquired { leaders[request.lock] = waiting.key }
            let answer = LockAnswer(
                acquired: acquired, sequence: grant.sequence, position: heard, generation: generation)
            answers.append((waiting.answerer, .success(answer)))
        }
        return answers
    }

    /// The locks of results sent (or refused) in the session that granted them, to release:
    /// a result of an older session is published, its lock went with it.
    private mutating func release(_ published: [Publication], _ generation: Int, as release: Release) {
        for publication in published where publication.generation == generation {
            leaders[publication.lock] = nil
            unlocks.append(Unlock(lock: publication.lock, release: release))
        }
    }

    private func liveSession(_ generation: Int) -> Live? {
        switch life {
        case .ready(let live), .draining(let live):
            return live.generation == generation ? live : nil
        case .idle, .connecting, .down, .stopped:
            return nil
        }
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

/// A lock request's answer, once every notification committed before it has been heard.
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
