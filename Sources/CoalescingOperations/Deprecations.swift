import Foundation

// The first release's spellings, kept compiling. Each says what replaces it; the CHANGELOG and
// <doc:ComingFromTheBlogPattern> list them all.

/// The first release's name for ``CoalescingError``.
@available(*, deprecated, renamed: "CoalescingError")
public typealias ConcurrentOperationError = CoalescingError

/// The blog pattern's name for ``CoalescingError``.
@available(*, deprecated, renamed: "CoalescingError")
public typealias CoalescibleOperationError = CoalescingError

extension CoalescingStatistics {
    /// Runs of the work that coalescing spared: the same number as ``callersJoined``.
    @available(*, deprecated, renamed: "callersJoined", message: "the same number as callersJoined")
    public var callersSaved: Int { callersJoined }
}

extension CoalescingHandle {
    /// Withdraws this caller; see ``withdraw()``. "Cancel" now means stopping the work for everyone.
    @available(*, deprecated, renamed: "withdraw()")
    public func cancel() { withdraw() }
}

extension OperationQueueManager {
    /// Adds any operation to ``queue``, coalescing a ``CoalescibleOperation``.
    @available(
        *, deprecated, message: "use enqueue(operation:) for a CoalescibleOperation, queue.addOperation(_:) for others"
    )
    public func enqueue(_ operation: Operation) {
        if let coalescible = operation as? any ManagerEnqueueable {
            coalescible.enqueue(on: self)
        } else if let concurrent = operation as? any QueueClaimable {
            let claimed = concurrent.claimForQueue()
            if claimed != nil { queue.addOperation(operation) }
        } else if !operation.isFinished && !operation.isExecuting {
            queue.addOperation(operation)
        }
    }
}

/// Lets the deprecated `enqueue(_:)` coalesce a ``CoalescibleOperation`` it sees as an `Operation`.
protocol ManagerEnqueueable: Operation {
    func enqueue(on manager: OperationQueueManager)
}

extension CoalescibleOperation: ManagerEnqueueable {
    func enqueue(on manager: OperationQueueManager) { manager.enqueue(operation: self) }
}

/// An operation that the deprecated `enqueue(_:)` claims before adding it to the queue, so that
/// it is never added twice.
protocol QueueClaimable: Operation {
    func claimForQueue() -> Bool?
}

extension ConcurrentOperation: QueueClaimable {
    /// Claims the operation for a queue: see ``Lifecycle/claimForQueue()``.
    func claimForQueue() -> Bool? { lifecycle.withLock { $0.claimForQueue() } }
}

extension CoalescibleOperation {
    /// Makes `operation` a caller of this operation's work, by hand.
    ///
    /// - Returns: True if `operation` joined; false, with no effect, if either operation is not
    ///   fresh or this one's result is decided.
    @available(*, deprecated, message: "enqueue both operations through one OperationQueueManager, which joins them")
    @discardableResult public final func coalesce(operation: CoalescibleOperation<Value>) -> Bool {
        // Looked at first, so that a call that cannot join leaves this operation as it was.
        guard operation !== self, case .fresh = operation.linked else { return false }
        switch linked {
        case .runs(let engine, let work): return engine.join(operation, to: work)
        case .fresh:
            guard let work = Engine.adopting(self), case .runs(let engine, _) = linked else {
                return false
            }
            return engine.join(operation, to: work)
        case .alone, .joined, .ended: return false
        }
    }
}

extension InFlightTaskCoalescer {
    /// The first release's name for ``value(key:priority:name:timeout:whenAbandoned:progress:operation:)``.
    @available(*, deprecated, message: "renamed to value(key:…), with the same arguments")
    public func deduplicated(
        key: Key, priority: TaskPriority? = nil, name: String? = nil, timeout: Duration? = nil,
        whenAbandoned: AbandonedWorkPolicy = .cancel, operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        try await value(
            key: key, priority: priority, name: name, timeout: timeout, whenAbandoned: whenAbandoned,
            operation: operation)
    }
}

extension PrefetchableTaskCoalescer {
    /// The first release's name for ``value(key:priority:name:timeout:whenAbandoned:progress:operation:)``.
    @available(*, deprecated, message: "renamed to value(key:…), with the same arguments")
    public func deduplicated(
        key: Key, priority: TaskPriority? = nil, name: String? = nil, timeout: Duration? = nil,
        whenAbandoned: AbandonedWorkPolicy = .cancel, operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        try await value(
            key: key, priority: priority, name: name, timeout: timeout, whenAbandoned: whenAbandoned,
            operation: operation)
    }
}

// The machine's step that only `coalesce(operation:)` needs; the storage's calls that carry it
// out, under its lock, are in Engine.swift, the one file that takes that lock.
extension Machine where Key == OperationKey {
    /// Where an operation joining `work` by hand would go: its next slot, if the work's result is
    /// open and its operation has not started (Guarantee 10: its start freezes its priority, under
    /// this lock). The storage takes the operation for it, and ``admit(_:_:taken:asking:watching:then:)``
    /// joins it.
    func planJoiningByHand<Value>(_ work: Work<OperationKey, Value>) -> AdmissionPlan<OperationKey, Value>? {
        guard case .running = work.state.phase, !work.state.priority.isFrozen else { return nil }
        return AdmissionPlan(work: work, slot: work.state.callers.entries.count)
    }
}
