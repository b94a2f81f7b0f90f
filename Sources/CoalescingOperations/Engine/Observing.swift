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
    /// Callers that arrived: each completion handler, absorbed operation or awaiting task, whether
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

    /// Runs of the work that coalescing spared: every caller that joined work in flight instead
    /// of starting its own. Never negative.
    public var callersSaved: Int { callersJoined }

    @usableFromInline mutating func countStart() {
        workStarted += 1
    }

    /// Counts a caller arriving: the first of a work started it, every later one joined.
    @usableFromInline mutating func countArrival(joining: Bool) {
        callersArrived += 1
        if joining {
            callersJoined += 1
        }
    }

    /// Counts a caller leaving before the work ended.
    mutating func countDeparture(_ reason: WithdrawalReason) {
        switch reason {
        case .withdrawn: callersWithdrawn += 1
        case .timedOut: callersTimedOut += 1
        }
    }

    /// Counts work ending, and the callers it served.
    mutating func countEnd(_ outcome: WorkOutcome, served: Int) {
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
            + "withdrawn \(callersWithdrawn), timed out \(callersTimedOut); saved \(callersSaved)"
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

    @usableFromInline init<Value>(_ result: Result<Value, Error>) {
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
/// coalescers. Events reach the observer in the order of the steps they describe: work starts
/// before callers join it, and a caller joins before it withdraws or the work ends.
public enum CoalescingEvent<Key: Hashable & Sendable>: Sendable {
    /// A caller found nothing in flight and started work.
    case workStarted(key: Key)
    /// A caller joined work in flight; `callers` is how many now wait for it.
    case callerJoined(key: Key, callers: Int)
    /// A caller stopped waiting before the work ended.
    case callerWithdrawn(key: Key, reason: WithdrawalReason)
    /// The work's priority changed to follow its callers.
    case priorityChanged(key: Key, priority: WorkPriority)
    /// The work ended; `callersServed` callers were handed its outcome, `duration` after it started.
    case workEnded(key: Key, outcome: WorkOutcome, callersServed: Int, duration: Duration)
    /// Work has been in flight longer than the stall threshold while callers still wait: a sign of
    /// work that never calls back. Reported once per work. See <doc:WhenCallersNeverHearBack>.
    case workStalled(key: Key, callers: Int, elapsed: Duration)
}

extension CoalescingEvent: CustomStringConvertible {
    /// The event on one line, for logs, with plain values:
    /// `callerWithdrawn(key: user, reason: timedOut)`.
    public var description: String {
        switch self {
        case .workStarted(let key): "workStarted(key: \(key))"
        case .callerJoined(let key, let callers): "callerJoined(key: \(key), callers: \(callers))"
        case .callerWithdrawn(let key, let reason): "callerWithdrawn(key: \(key), reason: \(reason))"
        case .priorityChanged(let key, let priority): "priorityChanged(key: \(key), priority: \(priority))"
        case .workEnded(let key, let outcome, let served, let duration):
            "workEnded(key: \(key), outcome: \(outcome), callersServed: \(served), duration: \(duration))"
        case .workStalled(let key, let callers, let elapsed):
            "workStalled(key: \(key), callers: \(callers), elapsed: \(elapsed))"
        }
    }

    /// The same event under another key: the manager reports identifiers, not its inner keys.
    func map<Other>(_ transform: (Key) -> Other) -> CoalescingEvent<Other> {
        switch self {
        case .workStarted(let key): .workStarted(key: transform(key))
        case .callerJoined(let key, let callers): .callerJoined(key: transform(key), callers: callers)
        case .callerWithdrawn(let key, let reason): .callerWithdrawn(key: transform(key), reason: reason)
        case .priorityChanged(let key, let priority): .priorityChanged(key: transform(key), priority: priority)
        case .workEnded(let key, let outcome, let served, let duration):
            .workEnded(key: transform(key), outcome: outcome, callersServed: served, duration: duration)
        case .workStalled(let key, let callers, let elapsed):
            .workStalled(key: transform(key), callers: callers, elapsed: elapsed)
        }
    }
}
