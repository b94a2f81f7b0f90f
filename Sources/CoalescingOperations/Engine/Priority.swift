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
    func event(rising: Bool) -> WorkPriority {
        rising ? .task(taskPriority) : .operation(operationPriority)
    }
}

/// A work's priority: the most urgent waiting caller's, over the floor the app set on the
/// operation, recomputed from the callers at each change (Guarantee 19). Part of the machine's
/// state: changed only under the engine's lock.
@usableFromInline struct PriorityState {
    /// Each caller's urgency, by slot; nil for a caller that asks for none or left.
    @usableFromInline var demands: ContiguousArray<Urgency?> = []
    @usableFromInline var floor: Urgency
    /// What was last written to whatever runs the work.
    @usableFromInline var applied: Urgency
    /// A task's priority only ever rises, so nothing is kept per caller.
    @usableFromInline let risesOnly: Bool
    /// The thread writing the priority, if one is; the operation's start waits for it.
    var writer: DispatchGroup?
    /// Set when the operation starts: its priority no longer moves.
    @usableFromInline var isFrozen = false

    @inlinable init(floor: Urgency, risesOnly: Bool) {
        (self.floor, applied, self.risesOnly) = (floor, floor, risesOnly)
    }

    /// The priority the work should have.
    var target: Urgency {
        demands.reduce(floor) { current, next in next.map(current.raised) ?? current }
    }

    /// The caller in `slot`, a task, was escalated to `task`: it asks for what it brought, raised
    /// to that, never less (Guarantee 19). Returns whether it raises the work.
    mutating func escalate(_ slot: Int, to task: TaskPriority) -> Bool {
        guard !risesOnly else { return demand(Urgency(task), from: slot) }
        let escalated = Urgency(serviceOf: task)
        guard demands.indices.contains(slot), let brought = demands[slot] else {
            return demand(escalated, from: slot)
        }
        return demand(brought.raised(to: escalated), from: slot)
    }

    /// Records the urgency of the caller in `slot`; returns whether it raises the work.
    @usableFromInline mutating func demand(_ urgency: Urgency, from slot: Int) -> Bool {
        if risesOnly {
            floor = floor.raised(to: urgency)
        } else {
            while demands.count <= slot { demands.append(nil) }
            demands[slot] = urgency
        }
        return !isFrozen && applied.raised(to: urgency) != applied
    }

    /// Forgets the urgency of the caller in `slot`; returns whether the work must follow: only a
    /// caller holding up one of the work's knobs lowers it by leaving.
    mutating func release(_ slot: Int) -> Bool {
        guard demands.indices.contains(slot), let released = demands[slot] else { return false }
        demands[slot] = nil
        return !isFrozen && released.holdsUp(applied)
    }
}
