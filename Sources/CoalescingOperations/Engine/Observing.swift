import Foundation

/// What a coalescer has done since it was created: a snapshot, exact under concurrency.
///
/// Read it from ``OperationQueueManager/statistics``, ``InFlightTaskCoalescer/statistics`` or
/// ``PrefetchableTaskCoalescer/statistics``. Every caller is counted once when it arrives (the
/// first caller of a work starts it, every later one joins it) and once when it leaves (served,
/// withdrawn or timed out), in the same step as the change it counts: once nothing is in flight,
/// ``callersArrived`` equals ``callersServed`` plus ``callersWithdrawn`` plus ``callersTimedOut``.
public struct CoalescingStatistics: Sendable, Equatable, CustomStringConvertible {
    /// Work started: its operation was added to the queue, or its task created.
    public internal(set) var workStarted = 0
    /// Callers that arrived: each completion handler, joined operation or awaiting task, whether
    /// it started the work or joined it. Work started with no caller of its own (an operation
    /// without a completion handler, say) counts no arrival until one comes.
    public internal(set) var callersArrived = 0
    /// Callers that joined work already in flight instead of starting their own.
    public internal(set) var callersJoined = 0
    /// Callers that withdrew before the work ended (cancelled their handle or their task).
    public internal(set) var callersWithdrawn = 0
    /// Callers withdrawn because their own timeout passed.
    public internal(set) var callersTimedOut = 0
    /// Callers handed the work's outcome: its value, its error, or the work's cancellation. A
    /// caller counts as served when the outcome is handed to its callback queue (or its task
    /// resumed), not when its handler has run: a handler whose queue is never serviced (a blocked
    /// main queue, say) still counts.
    public internal(set) var callersServed = 0
    /// Work that ended with a value.
    public internal(set) var workSucceeded = 0
    /// Work that ended with an error other than cancellation.
    public internal(set) var workFailed = 0
    /// Work that was cancelled, directly or because its last caller withdrew.
    public internal(set) var workCancelled = 0

    /// Creates statistics with every count at zero.
    public init() {}

    /// Work that has ended, whatever its outcome.
    public var workEnded: Int { workSucceeded + workFailed + workCancelled }

    /// Work started and not yet ended.
    public var workInFlight: Int { workStarted - workEnded }

    /// Counts work starting, and returns its number: 1 for the first.
    @usableFromInline mutating func countStart() -> Int {
        workStarted += 1
        return workStarted
    }

    /// Counts a caller arriving: the first of a work started it, every later one joined.
    @usableFromInline mutating func countArrival(joining: Bool) {
        callersArrived += 1
        callersJoined += joining ? 1 : 0
    }

    /// Counts a caller leaving before the work ended.
    mutating func countDeparture(_ reason: WithdrawalReason) {
        switch reason {
        case .withdrawn: callersWithdrawn += 1
        case .timedOut: callersTimedOut += 1
        }
    }

    /// Counts work ending, and the callers it served.
    @usableFromInline mutating func countEnd(_ outcome: WorkOutcome, served: Int) {
        callersServed += served
        switch outcome {
        case .succeeded: workSucceeded += 1
        case .failed: workFailed += 1
        case .cancelled: workCancelled += 1
        }
    }

    /// The counts on one line, for logs.
    public var description: String {
        "work started \(workStarted), in flight \(workInFlight), succeeded \(workSucceeded), failed \(workFailed), "
            + "cancelled \(workCancelled); callers arrived \(callersArrived), joined \(callersJoined), "
            + "served \(callersServed), "
            + "withdrawn \(callersWithdrawn), timed out \(callersTimedOut)"
    }
}

/// How a piece of work ended.
public enum WorkOutcome: Sendable, Equatable {
    /// The work produced a value.
    case succeeded
    /// The work threw or finished with an error.
    case failed
    /// The work was cancelled, directly or because its last caller withdrew.
    case cancelled

    @inlinable init<Value>(_ result: Result<Value, Error>) {
        switch result {
        case .success: self = .succeeded
        case .failure(let error) where error is CancellationError: self = .cancelled
        case .failure(CoalescingError.cancelled): self = .cancelled
        case .failure: self = .failed
        }
    }
}

/// Why one caller stopped waiting before the work ended.
public enum WithdrawalReason: Sendable, Equatable {
    /// The caller cancelled its handle, its operation or its task.
    case withdrawn
    /// The caller's own timeout passed.
    case timedOut
}

/// How urgent the work is, in the terms of the API that runs it.
public enum WorkPriority: Sendable, Equatable, CustomStringConvertible {
    /// An operation's priority on its queue.
    case operation(OperationPriority)
    /// A task's priority.
    case task(TaskPriority)

    /// The priority in its API's own terms: `queuePriority high, qualityOfService utility`, or a
    /// task's priority.
    public var description: String {
        switch self {
        case .operation(let priority):
            "queuePriority \(priority.queuePriority), qualityOfService \(priority.qualityOfService)"
        case .task(let priority): "\(priority)"
        }
    }
}

/// One step in the life of coalesced work, handed to the observer given to a coalescer.
///
/// `Key` is the identifier (`String`) for ``OperationQueueManager`` and the key for the task
/// coalescers. `work` numbers the pieces of work of one coalescer in the order they started, from
/// 1: every event of one piece of work carries the same number, so that a log line, a span and a
/// metric of that work can be matched (inside task work, ``ProgressReporter/work`` is the same
/// number). Events reach the observer in the order of the steps they describe: work starts
/// before callers join it, and a caller joins before it withdraws or the work ends.
public enum CoalescingEvent<Key: Hashable & Sendable>: Sendable {
    /// A caller found nothing in flight and started work.
    case workStarted(key: Key, work: Int)
    /// A caller joined work in flight; `callers` is how many now wait for it.
    case callerJoined(key: Key, work: Int, callers: Int)
    /// A caller stopped waiting before the work ended.
    case callerWithdrawn(key: Key, work: Int, reason: WithdrawalReason)
    /// The work's priority changed to follow its callers.
    case priorityChanged(key: Key, work: Int, priority: WorkPriority)
    /// The work ended; `callersServed` callers were handed its outcome, `duration` after it started.
    /// `error` is what a work that ``WorkOutcome/failed`` threw or finished with, as its callers
    /// receive it; nil for the other outcomes.
    case workEnded(key: Key, work: Int, outcome: WorkOutcome, error: Error?, callersServed: Int, duration: Duration)
    /// Work has been in flight longer than the stall threshold while callers still wait: a sign of
    /// work that never calls back. Reported once per work. See <doc:WhenCallersNeverHearBack>.
    case workStalled(key: Key, work: Int, callers: Int, elapsed: Duration)
}

extension CoalescingEvent: CustomStringConvertible {
    /// The event on one line, for logs, with plain values:
    /// `callerWithdrawn(key: user, work: 3, reason: timedOut)`; a failure names its error.
    public var description: String {
        switch self {
        case .workStarted(let key, let work): "workStarted(key: \(key), work: \(work))"
        case .callerJoined(let key, let work, let callers):
            "callerJoined(key: \(key), work: \(work), callers: \(callers))"
        case .callerWithdrawn(let key, let work, let reason):
            "callerWithdrawn(key: \(key), work: \(work), reason: \(reason))"
        case .priorityChanged(let key, let work, let priority):
            "priorityChanged(key: \(key), work: \(work), priority: \(priority))"
        case .workEnded(let key, let work, let outcome, let error, let served, let duration):
            "workEnded(key: \(key), work: \(work), outcome: \(outcome)\(error.map { ", error: \($0)" } ?? ""), "
                + "callersServed: \(served), duration: \(duration))"
        case .workStalled(let key, let work, let callers, let elapsed):
            "workStalled(key: \(key), work: \(work), callers: \(callers), elapsed: \(elapsed))"
        }
    }

    /// The same event with its key transformed: for a front-end whose in-process key carries more
    /// than the key its users see (the manager reports identifiers, not its keys, which hold the
    /// `Value` type too; the Postgres coalescer's keys carry how often they were forgotten).
    ///
    /// - Parameter transform: Maps this event's key to the one to report.
    /// - Returns: The event, under the transformed key.
    public func map<Other>(_ transform: (Key) -> Other) -> CoalescingEvent<Other> {
        switch self {
        case .workStarted(let key, let work): .workStarted(key: transform(key), work: work)
        case .callerJoined(let key, let work, let callers):
            .callerJoined(key: transform(key), work: work, callers: callers)
        case .callerWithdrawn(let key, let work, let reason):
            .callerWithdrawn(key: transform(key), work: work, reason: reason)
        case .priorityChanged(let key, let work, let priority):
            .priorityChanged(key: transform(key), work: work, priority: priority)
        case .workEnded(let key, let work, let outcome, let error, let served, let duration):
            .workEnded(
                key: transform(key), work: work, outcome: outcome, error: error, callersServed: served,
                duration: duration)
        case .workStalled(let key, let work, let callers, let elapsed):
            .workStalled(key: transform(key), work: work, callers: callers, elapsed: elapsed)
        }
    }
}

// MARK: - Delivering events

/// The events recorded and not yet delivered, with work ends whose callers wait for their event
/// to be delivered first (Guarantee 22). One thread delivers at a time.
@usableFromInline struct Outbox<Key: Hashable & Sendable> {
    @usableFromInline enum Item {
        case event(CoalescingEvent<Key>)
        case settle(@Sendable () -> Void)
    }

    @usableFromInline var pending: [Item] = []
    /// The emptied buffer of the last batch, so that recording allocates nothing once warm (an
    /// observed join cost twice as much without it).
    var spare: [Item] = []
    var isDelivering = false

    // The outbox's events are phase-free: they concern the coalescer's one queue of events, not a
    // work, whose settles they carry whatever its phase (Guarantee 22). The machine's own, called
    // as `outbox?.startDelivering(then:)`: nil, nobody observes, and nothing is delivered.

    /// Event: a thread offers to deliver the events. Returns the batch if it is the one to; nil,
    /// another thread delivers, and `settle` waits behind the events for it.
    mutating func startDelivering(then settle: (@Sendable () -> Void)?) -> [Item]? {
        guard !isDelivering else {
            if let settle { pending.append(.settle(settle)) }
            return nil
        }
        isDelivering = true
        return takeEvents()
    }

    /// Event: a batch was delivered. Returns the next one; nil, the outbox is empty, and this
    /// thread's delivery is over.
    mutating func continueDelivering(reusing spare: [Item]) -> [Item]? {
        self.spare = spare
        guard !pending.isEmpty else {
            isDelivering = false
            return nil
        }
        return takeEvents()
    }

    mutating func takeEvents() -> [Item] {
        var taken = spare
        spare = []
        swap(&taken, &pending)
        return taken
    }
}
