import Foundation

/// What a coalescer has done since it was created: a snapshot, exact under concurrency.
///
/// Read it from ``OperationQueueManager/statistics``, ``InFlightTaskCoalescer/statistics`` or
/// ``PrefetchableTaskCoalescer/statistics``. Every caller is counted once when it arrives (it
/// either starts work or joins it) and once when it leaves (served, withdrawn or timed out).
public struct CoalescingStatistics: Sendable, Equatable, CustomStringConvertible {
    /// Work started: callers that found nothing in flight.
    public internal(set) var workStarted = 0
    /// Callers that joined work already in flight instead of starting their own.
    public internal(set) var callersJoined = 0
    /// Callers that withdrew before the work ended (cancelled their handle or their task).
    public internal(set) var callersWithdrawn = 0
    /// Callers withdrawn because their own timeout passed.
    public internal(set) var callersTimedOut = 0
    /// Callers handed the work's outcome: its value, its error, or the work's cancellation.
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

    /// Runs of the work that coalescing spared: callers served minus work ended.
    public var callersSaved: Int { callersServed - workEnded }

    /// The counts on one line, for logs.
    public var description: String {
        "work started \(workStarted), in flight \(workInFlight), succeeded \(workSucceeded), failed \(workFailed), "
            + "cancelled \(workCancelled); callers joined \(callersJoined), served \(callersServed), "
            + "withdrawn \(callersWithdrawn), timed out \(callersTimedOut); saved \(callersSaved)"
    }

    @usableFromInline
    mutating func recordStart() {
        workStarted += 1
    }

    @usableFromInline
    mutating func recordJoin() {
        callersJoined += 1
    }

    mutating func recordEnd(_ outcome: WorkOutcome, callersServed served: Int) {
        callersServed += served
        switch outcome {
        case .succeeded: workSucceeded += 1
        case .failed: workFailed += 1
        case .cancelled: workCancelled += 1
        }
    }

    @usableFromInline
    mutating func recordWithdrawal(_ reason: WithdrawalReason) {
        switch reason {
        case .withdrawn: callersWithdrawn += 1
        case .timedOut: callersTimedOut += 1
        }
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

    @usableFromInline
    init<Value>(_ result: Result<Value, Error>) {
        switch result {
        case .success: self = .succeeded
        case .failure(let error) where error is CancellationError: self = .cancelled
        case .failure(ConcurrentOperationError.cancelled): self = .cancelled
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
public enum WorkPriority: Sendable, Equatable {
    /// An operation's priority on its queue.
    case operation(OperationPriority)
    /// A task's priority.
    case task(TaskPriority)
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

/// Hands a coalescer's events to its observer one at a time, in the order they were recorded,
/// with none of the coalescer's locks held.
///
/// Record under the coalescer's own lock, so that events keep the order of the changes they
/// describe; drain after releasing it. Whichever thread finds nobody draining delivers everything
/// pending, including what other threads record meanwhile, so an observer that calls back into the
/// coalescer only adds to the queue it is being fed from, and never deadlocks.
@usableFromInline
final class EventChannel<Key: Hashable & Sendable>: Sendable {
    private struct Pending: Sendable {
        var events: [CoalescingEvent<Key>] = []
        /// The emptied buffer of the last batch delivered, kept so that recording allocates
        /// nothing once the channel has warmed up: an observer's cost per join halved with it.
        var spare: [CoalescingEvent<Key>] = []
        var isDraining = false

        /// Takes the queued events, leaving the spare buffer in their place.
        mutating func takeEvents() -> [CoalescingEvent<Key>] {
            var taken = spare
            spare = []
            swap(&taken, &events)
            return taken
        }
    }

    private let observer: @Sendable (CoalescingEvent<Key>) -> Void
    private let pending = LockedState(Pending())

    init(_ observer: @escaping @Sendable (CoalescingEvent<Key>) -> Void) {
        self.observer = observer
    }

    /// Queues `event`. Call it under the lock that guards the change it describes.
    ///
    /// Specialized for the manager's identifiers: run generic, recording and delivering cost a
    /// join with an observer ~500 ns more (BENCHMARKS.md).
    @usableFromInline
    @_specialize(where Key == String)
    func record(_ event: CoalescingEvent<Key>) {
        pending.withLock { $0.events.append(event) }
    }

    /// Delivers every queued event, unless another thread is already delivering them.
    @usableFromInline
    @_specialize(where Key == String)
    func drain() {
        var batch = pending.withLock { pending -> [CoalescingEvent<Key>] in
            guard !pending.isDraining, !pending.events.isEmpty else { return [] }
            pending.isDraining = true
            return pending.takeEvents()
        }
        while !batch.isEmpty {
            for event in batch {
                observer(event)
            }
            batch.removeAll(keepingCapacity: true)
            batch = pending.withLock { [batch] pending in
                pending.spare = batch
                guard !pending.events.isEmpty else {
                    pending.isDraining = false
                    return []
                }
                return pending.takeEvents()
            }
        }
    }
}
