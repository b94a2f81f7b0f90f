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
        if let ours = operation as? any ManagerEnqueueable {
            ours.enqueue(on: self)
        } else if !operation.isFinished && !operation.isExecuting {
            queue.addOperation(operation)
        }
    }
}

/// Lets the deprecated `enqueue(_:)` hand an operation of this library, which it sees as an
/// `Operation`, to the manager in the operation's own way.
protocol ManagerEnqueueable: Operation {
    func enqueue(on manager: OperationQueueManager)
}

extension ConcurrentOperation: ManagerEnqueueable {
    /// A ``CoalescibleOperation`` is coalesced; any other is claimed for the queue first (see
    /// ``Lifecycle/claimForQueue()``), so that it is never added twice.
    func enqueue(on manager: OperationQueueManager) {
        if let coalescible = self as? CoalescibleOperation<Value> {
            manager.enqueue(operation: coalescible)
            return
        }
        let claimed = lifecycle.withLock { $0.claimForQueue() }
        if claimed != nil { manager.queue.addOperation(self) }
    }
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
        // Fresh, this one runs work of its own first. Taken meanwhile, by a manager say, it is
        // joined where it runs, as if taken before this call.
        if case .fresh = linked { Engine.adopt(self) }
        guard case .runs(let engine, let work) = linked else { return false }
        return engine.join(operation, to: work)
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
    func planJoiningByHand<Value>(_ work: Work<OperationKey, Value>) -> Entry<OperationKey, Value>? {
        guard case .running = work.state.phase, !work.state.priority.isFrozen else { return nil }
        return Entry(work, slot: work.state.callers.entries.count)
    }
}
