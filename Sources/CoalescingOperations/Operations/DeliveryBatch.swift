import Foundation

/// Collects the callers of one result and hands it to them with one hop per distinct queue.
///
/// A million callers on one queue cost one queue hop and a loop, not a million hops or a million
/// nested closures; the loop runs on the callers' queue, so the stack never grows with them. When
/// every caller of an operation shares one queue (the common case) their list moves into the hop
/// whole, untouched. Inlinable, so that the loops are specialized for the caller's `Value`.
@usableFromInline
struct DeliveryBatch<Value> {
    @usableFromInline typealias Callers = ContiguousArray<Subscriber<Value>?>

    /// Callers that asked for no queue: served on the finishing thread.
    @usableFromInline var inline: Callers = []
    @usableFromInline var groups: ContiguousArray<(queue: OperationQueue, callers: Callers)> = []
    /// Where each queue's group is, once there are many; consulted only when a caller's queue
    /// differs from the last one's.
    @usableFromInline var groupIndex: [ObjectIdentifier: Int] = [:]
    @usableFromInline var lastGroup = -1

    @inlinable
    init() {}

    /// Adds the callers of a resolved operation; `queues` says whether they share one queue.
    @inlinable
    mutating func add(_ callers: Callers, sharing queues: CallerQueues, _ result: Result<Value, Error>) {
        if case .one(let queue) = queues, inline.isEmpty, groups.isEmpty {
            if let queue {
                groups.append((queue, callers))
            } else {
                inline = callers
            }
            return
        }
        for caller in callers {
            if let caller {
                add(caller, result)
            }
        }
    }

    /// Adds one caller. An absorbed operation is resolved with `result` here, and its own callers
    /// join the batch, so they are served in the same hops.
    @inlinable
    mutating func add(_ caller: Subscriber<Value>, _ result: Result<Value, Error>) {
        switch caller {
        case .handler(_, queue: nil):
            inline.append(caller)
        case .handler(_, queue: let queue?):
            let index = group(for: queue)
            groups[index].callers.append(caller)
        case .operation(let operation):
            addCallers(of: operation, result)
        }
    }

    /// Resolves an absorbed operation and adds its callers. Not inlined: absorbed operations are
    /// the slow path, and keeping the recursion out of line lets the rest be specialized.
    @usableFromInline
    mutating func addCallers(of operation: ConcurrentOperation<Value>, _ result: Result<Value, Error>) {
        if operation.resolve(with: result, into: &self) {
            operation.settle()
        }
    }

    /// Tells one caller that it will not get the work's result: it was withdrawn, or it could
    /// not join.
    @usableFromInline
    static func cancel(_ caller: Subscriber<Value>) {
        let cancelled = Result<Value, Error>.failure(ConcurrentOperationError.cancelled)
        var batch = DeliveryBatch()
        batch.add(caller, cancelled)
        batch.deliver(cancelled)
    }

    /// Hands `result` to every caller: one operation per distinct queue, then the inline callers.
    @inlinable
    consuming func deliver(_ result: Result<Value, Error>) {
        for (queue, callers) in groups {
            queue.addOperation(DeliveryOperation { Self.serve(callers, with: result) })
        }
        Self.serve(inline, with: result)
    }

    @inlinable
    static func serve(_ callers: Callers, with result: Result<Value, Error>) {
        for case .handler(let handler, _)? in callers {
            handler(result)
        }
    }

    @inlinable
    mutating func group(for queue: OperationQueue) -> Int {
        if lastGroup >= 0, groups[lastGroup].queue === queue {
            return lastGroup
        }
        if groupIndex.isEmpty {
            for index in groups.indices where groups[index].queue === queue {
                lastGroup = index
                return index
            }
        } else if let index = groupIndex[ObjectIdentifier(queue)] {
            lastGroup = index
            return index
        }
        lastGroup = groups.count
        groups.append((queue, []))
        // A few queues are found by a scan; past that, by a dictionary built once.
        if groups.count == Self.scannedGroups {
            for (index, group) in groups.enumerated() {
                groupIndex[ObjectIdentifier(group.queue)] = index
            }
        } else if groups.count > Self.scannedGroups {
            groupIndex[ObjectIdentifier(queue)] = lastGroup
        }
        return lastGroup
    }

    @inlinable
    static var scannedGroups: Int { 8 }
}
