#if Postgres
/// What a ``DatabaseStep`` decides, with no I/O: whether to take a result it heard, ask for the
/// key's lock, wait for news, or lead, and whether leading is a take-over. The step holds it in a
/// local variable, tells it each event, and carries out what it returns (the read, the request,
/// the wait), as the ``Session`` does with its machine; the session's explorer drives it too.
///
/// The step's clock is the channel's: `position` counts the notifications its session heard, so
/// that news is judged by when it came, relative to the step's own requests.
struct StepStateMachine: Hashable {
    /// A step of a caller registered after ``PostgresCoalescer/forget(key:)``: it accepts only a
    /// run that started after its own first request.
    let freshOnly: Bool
    /// The sequence value of the step's first answer: the line a forgetting step's run starts after.
    private(set) var after: Int64?
    /// The position of the last answer that did not make this step the leader, once there was one.
    private(set) var refused: UInt64?
    private var mustAsk = true

    init(freshOnly: Bool) {
        self.freshOnly = freshOnly
    }

    enum Look: Hashable {
        /// A result heard for the lock: take it (from the notification, or read by the full key).
        case take(Heard)
        /// Ask for the lock; `first` when the step has not asked before.
        case ask(first: Bool)
        /// Wait for news, a take-over check or a lost session.
        case wait
    }

    /// The step looks at what its session heard for it.
    mutating func look(_ news: News) -> Look {
        if let result = news.result, accepts(result) { return .take(result) }
        // A release after the refusal (a result is one too: its lock went in the statement that
        // announced it): the run this step waits for ended, or its leader gave up; after a first
        // refusal, which waits for no barrier, it may be an earlier run's, heard late, and asking
        // again only costs a statement.
        if let release = news.release, let refused, release.position > refused { mustAsk = true }
        return mustAsk ? .ask(first: after == nil) : .wait
    }

    /// The result the step took was not the key's (a colliding key's, or gone from the table).
    mutating func resultGone() {
        mustAsk = true
    }

    enum Answered: Hashable {
        /// The step runs the work; a take-over when it replaces a run that ended without a result.
        case lead(tookOver: Bool)
        /// The lock was granted, but a result came first: give the lock back, saying a result was
        /// published, and look again.
        case giveBack
        /// Refused for the first time: the step waits for another process (an event says so).
        case waiting
        /// Look again.
        case look
    }

    /// The session answered the step's request; `news` is what it heard for the step since.
    mutating func answered(_ answer: LockAnswer, news: News) -> Answered {
        if after == nil { after = answer.sequence }
        // A result the step accepts, by the line its first answer drew, not this one's: a forgetting
        // step refused again must still take a run that started after it first asked.
        let fresh = news.result.map(accepts) ?? false
        if answer.acquired, !fresh {
            // A take-over replaces a run that ended without a result: this step found the lock
            // held (or heard its run given up) and now has it, with no result since. Only a
            // release heard since the step was last refused can say that run published; an older
            // one (the run before, or a step's release after a result it heard) says nothing about
            // the run the step was refused by.
            let releasedSince = news.release.flatMap { $0.position > (refused ?? 0) ? $0 : nil }
            let tookOver = (refused != nil || releasedSince?.published == false) && releasedSince?.published != true
            return .lead(tookOver: tookOver)
        }
        let firstRefusal = refused == nil && !fresh
        refused = answer.position
        mustAsk = false
        if answer.acquired { return .giveBack }
        return firstRefusal ? .waiting : .look
    }

    /// The step woke: news, or a reason to ask again.
    mutating func woke(_ wake: Wake) {
        switch wake {
        case .news: break
        case .tick, .lost: mustAsk = true
        }
    }

    private func accepts(_ result: Heard) -> Bool {
        guard freshOnly else { return true }
        return after.map { result.started > $0 } ?? false
    }
}

/// Why a waiting step should look again.
enum Wake: Sendable, Hashable {
    case news, tick, lost
}
#endif
