import Foundation

/// One caller's place in coalesced work, returned by ``OperationQueueManager``'s `enqueue` methods.
///
/// Keep it to withdraw this caller later; discard it if you never will.
public struct CoalescingHandle<Value>: Sendable {
    /// What `enqueue` did with the caller.
    public enum Admission: Sendable, Equatable {
        /// No identical work was in flight: this caller's operation was added to the queue.
        case startedWork
        /// Identical work was in flight: this caller joined it, and no new work was queued.
        case joinedWork
        /// The operation was not fresh (already enqueued, absorbed, started, finished or
        /// cancelled), so nothing changed; the handle still refers to its existing caller.
        case ignored
    }

    /// What `enqueue` did with the caller.
    public let admission: Admission

    /// The operation holding this caller, and the caller's slot in it.
    @usableFromInline let operation: ConcurrentOperation<Value>?
    @usableFromInline let slot: Int?

    @inlinable
    init(_ admission: Admission, operation: ConcurrentOperation<Value>?, slot: Int?) {
        self.admission = admission
        self.operation = operation
        self.slot = slot
    }

    /// Withdraws this caller: its handler receives one `.failure(ConcurrentOperationError.cancelled)`
    /// unless the result is already on its way, and the other callers are unaffected. When the last
    /// caller withdraws, the work is cancelled. Calling it again does nothing.
    public func cancel() {
        operation?.withdraw(slot: slot)
    }
}
