import Foundation

/// How urgent work is, in the one small form the engine compares and stores: an operation's two
/// knobs (queue priority, and quality of service by urgency), or a task's priority in the second.
/// Each knob rises on its own. ``WorkPriority``, the public form, is built only for the observer.
@usableFromInline struct Urgency: Equatable, Sendable {
    @usableFromInline var queue: Int8
    @usableFromInline var service: UInt8

    @inlinable init(_ priority: OperationPriority) {
        queue = priority.queueLevel
        service = priority.serviceUrgency
    }

    @inlinable init(_ priority: TaskPriority) {
        queue = 0
        service = priority.rawValue
    }

    /// A task's priority in an operation's terms: the quality of service that matches it
    /// (Guarantees 11 and 19), and nothing asked of the queue priority, which a task has none of.
    @usableFromInline init(serviceOf task: TaskPriority) {
        let service: QualityOfService =
            switch task.rawValue {
            case ..<TaskPriority.utility.rawValue: .background
            case ..<TaskPriority.medium.rawValue: .utility
            case ..<TaskPriority.userInitiated.rawValue: .default
            case TaskPriority.userInitiated.rawValue: .userInitiated
            default: .userInteractive
            }
        queue = .min
        self.service = service.urgency
    }

    @inlinable func raised(to other: Urgency) -> Urgency {
        var raised = self
        raised.queue = max(queue, other.queue)
        raised.service = max(service, other.service)
        return raised
    }

    /// Whether this urgency holds up either knob of `applied`: only a caller asking for it can
    /// lower the work by leaving.
    func holdsUp(_ applied: Urgency) -> Bool {
        queue >= applied.queue || service >= applied.service
    }

    var operationPriority: OperationPriority {
        var priority = OperationPriority()
        priority.queueLevel = queue
        priority.serviceUrgency = service
        return priority
    }

    var taskPriority: TaskPriority { TaskPriority(rawValue: service) }

    /// The public form, for the observer: a task's priority, or an operation's.
    @usableFromInline func event(rising: Bool) -> WorkPriority {
        rising ? .task(taskPriority) : .operation(operationPriority)
    }
}

/// A work's priority, apart from what each caller asks for (``Slot/demand``): the floor the app
/// set on the operation, what was last written, and who writes. The work's priority is the most
/// urgent waiting caller's over the floor, recomputed from the slots at each change
/// (Guarantee 19). Part of the work's state: changed only under the engine's lock.
@usableFromInline struct PriorityState {
    @usableFromInline var floor: Urgency
    /// What was last written to whatever runs the work.
    @usableFromInline var applied: Urgency
    /// A task's priority only ever rises, so nothing is kept per caller.
    @usableFromInline let risesOnly: Bool
    /// The thread writing the priority, if one is; the operation's start waits for it.
    @usableFromInline var writer: DispatchGroup?
    /// Set when the operation starts: its priority no longer moves.
    @usableFromInline var isFrozen = false

    @inlinable init(floor: Urgency, risesOnly: Bool) {
        (self.floor, applied, self.risesOnly) = (floor, floor, risesOnly)
    }
}

extension WorkState {
    /// The priority the work should have.
    @inlinable var target: Urgency {
        var target = priority.floor
        for slot in callers.entries {
            if let demand = slot.demand { target = target.raised(to: demand) }
        }
        return target
    }

    /// The caller in `slot`, a task, was escalated to `task`: it asks for what it brought, raised
    /// to that, never less (Guarantee 19). Returns whether it raises the work.
    mutating func escalate(_ slot: Int, to task: TaskPriority) -> Bool {
        guard !priority.risesOnly else { return demand(Urgency(task), from: slot) }
        let escalated = Urgency(serviceOf: task)
        guard let brought = callers.entries[slot].demand else { return demand(escalated, from: slot) }
        return demand(brought.raised(to: escalated), from: slot)
    }

    /// Records the urgency of the caller in `slot`; returns whether it raises the work. Inlinable:
    /// out of line, a generic `WorkState` reached the slot through its value witnesses, ~50 ns a join.
    @inlinable mutating func demand(_ urgency: Urgency, from slot: Int) -> Bool {
        if priority.risesOnly {
            priority.floor = priority.floor.raised(to: urgency)
        } else {
            callers.entries[slot].demand = urgency
        }
        return !priority.isFrozen && priority.applied.raised(to: urgency) != priority.applied
    }

    /// Forgets the urgency of the caller in `slot`; returns whether the work must follow: only a
    /// caller holding up one of the work's knobs lowers it by leaving.
    mutating func release(_ slot: Int) -> Bool {
        guard let released = callers.entries[slot].demand else { return false }
        callers.entries[slot].demand = nil
        return !priority.isFrozen && released.holdsUp(priority.applied)
    }
}
