import Foundation

/// One caller's place in coalesced work, returned by ``OperationQueueManager``'s `enqueue` methods.
///
/// Keep it to withdraw this caller or change its priority later; discard it if you never will.
public struct CoalescingHandle<Value: Sendable>: Sendable {
    /// What `enqueue` did with the caller.
    public enum Admission: Sendable, Equatable {
        /// No identical work was in flight: this caller's operation was added to the queue.
        case startedWork
        /// Identical work was in flight: this caller joined it, and no new work was queued.
        case joinedWork
        /// The operation was not fresh (already enqueued, joined to other work, started, finished or
        /// cancelled), so nothing changed. The handle controls nothing.
        case ignored
    }

    /// What `enqueue` did with the caller.
    public let admission: Admission

    /// The caller's engine, its work and its slot there; no work for an ignored enqueue. Not the
    /// whole ``Entry``: a handle that carried its flags cost every join ~30 instructions to copy and
    /// to destroy (BENCHMARKS.md, issue 45).
    @usableFromInline let engine: Engine<OperationKey>
    @usableFromInline let work: Work<OperationKey, Value>?
    @usableFromInline let slot: Int?

    /// The handle of a caller admitted by `engine`.
    @inlinable init(_ admitted: Admitted<OperationKey, Value>, of engine: Engine<OperationKey>) {
        switch admitted {
        case .starts(let entry):
            (admission, self.engine, work, slot) = (.startedWork, engine, entry.work, entry.slot)
        case .joins(let entry):
            (admission, self.engine, work, slot) = (.joinedWork, engine, entry.work, entry.slot)
        case .turnsAway(_, let runs):
            (admission, self.engine, work, slot) = (runs ? .startedWork : .ignored, engine, nil, nil)
        }
    }

    /// Withdraws this caller: its handler receives one `.failure(CancellationError())` unless the
    /// result is already on its way, and the other callers are unaffected. When the last caller
    /// withdraws, the work is cancelled, or runs on if its
    /// ``CoalescibleOperation/abandonedWorkPolicy`` says so. Calling it again does nothing.
    public func withdraw() {
        if let work { engine.withdraw(work, slot: slot, reason: .withdrawn) }
    }

    /// Changes how urgent this caller is. While the work waits on its queue, it runs at the
    /// priority of its most urgent caller, and never below what the app set on its operation; a
    /// later change, up or down, moves it. Once the work has started, this does nothing.
    ///
    /// - Parameter priority: The caller's new priority; nil asks for nothing.
    public func setPriority(_ priority: OperationPriority?) {
        if let work { engine.reprioritize(work, slot: slot, to: priority.map(Urgency.init)) }
    }
}
