import Foundation

/// One caller's place in coalesced work, returned by ``OperationQueueManager``'s `enqueue` methods.
///
/// Keep it to withdraw this caller or change its priority later; discard it if you never will.
public struct CoalescingHandle<Value>: Sendable {
    /// What `enqueue` did with the caller.
    public enum Admission: Sendable, Equatable {
        /// No identical work was in flight: this caller's operation was added to the queue.
        case startedWork
        /// Identical work was in flight: this caller joined it, and no new work was queued.
        case joinedWork
        /// The operation was not fresh (already enqueued, absorbed, started, finished or
        /// cancelled), so nothing changed; the handle still refers to its existing caller. One
        /// cancelled before it was ever enqueued is added to the queue to finish without running.
        case ignored
    }

    /// What `enqueue` did with the caller.
    public let admission: Admission

    /// The operation holding this caller, and the caller's slot in it.
    @usableFromInline let operation: CoalescibleOperation<Value>?
    @usableFromInline let slot: Int?

    @inlinable
    init(_ admission: Admission, operation: CoalescibleOperation<Value>?, slot: Int?) {
        self.admission = admission
        self.operation = operation
        self.slot = slot
    }

    /// Withdraws this caller: its handler receives one `.failure(ConcurrentOperationError.cancelled)`
    /// unless the result is already on its way, and the other callers are unaffected. When the last
    /// caller withdraws, the work is cancelled, or runs on if its
    /// ``CoalescibleOperation/abandonedWorkPolicy`` says so. Calling it again does nothing.
    public func cancel() {
        operation?.withdraw(slot, reason: .withdrawn)
    }

    /// Changes how urgent this caller is. While the work waits on its queue, it runs at the
    /// priority of its most urgent caller, and never below what the app set on its operation; a
    /// later change, up or down, moves it. Once the work has started, this does nothing.
    ///
    /// - Parameter priority: The caller's new priority; nil asks for nothing.
    public func setPriority(_ priority: OperationPriority?) {
        operation?.reprioritize(slot, to: priority)
    }

    /// Withdraws this caller with `CoalescingError.timedOut` once `timeout` has passed, unless the
    /// result reached it first. Holds the work only weakly meanwhile.
    @usableFromInline
    func withdraw(after timeout: Duration) {
        guard let operation else { return }
        let slot = slot
        schedule(after: timeout) { [weak operation] in
            operation?.withdraw(slot, reason: .timedOut)
        }
    }
}
