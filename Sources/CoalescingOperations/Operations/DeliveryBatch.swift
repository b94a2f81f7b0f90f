import Foundation

/// Collects the callers of one result and hands it to them with one hop per distinct queue.
///
/// A million callers on one queue cost one queue hop and a loop, not a million hops or a million
/// nested closures; the loop runs on the callers' queue, so the stack never grows with them.
struct DeliveryBatch<Value> {
    typealias Handler = (Result<Value, Error>) -> Void

    /// Handlers of callers that asked for no queue: run on the finishing thread.
    private var inline: ContiguousArray<Handler> = []
    private var groups: ContiguousArray<(queue: OperationQueue, handlers: ContiguousArray<Handler>)> = []
    /// Where each queue's group is, once there are many; consulted only when a caller's queue
    /// differs from the last one's.
    private var groupIndex: [ObjectIdentifier: Int] = [:]
    private var lastGroup = -1

    /// Adds a caller. An absorbed operation is resolved with `result` here, and its own callers
    /// join the batch, so they are served in the same hops.
    mutating func add(_ caller: Subscriber<Value>, _ result: Result<Value, Error>) {
        switch caller {
        case .handler(let handler, queue: nil):
            inline.append(handler)
        case .handler(let handler, queue: let queue?):
            let index = group(for: queue)
            groups[index].handlers.append(handler)
        case .operation(let operation):
            _ = operation.resolve(with: result, into: &self)
        }
    }

    /// Hands `result` to every caller: one operation per distinct queue, then the inline handlers.
    consuming func deliver(_ result: Result<Value, Error>) {
        for group in groups {
            group.queue.addOperation(DeliveryOperation(handlers: group.handlers, result: result))
        }
        for handler in inline {
            handler(result)
        }
    }

    private mutating func group(for queue: OperationQueue) -> Int {
        if lastGroup >= 0, groups[lastGroup].queue === queue {
            return lastGroup
        }
        if let index = groupIndex.isEmpty
            ? groups.firstIndex(where: { $0.queue === queue })
            : groupIndex[ObjectIdentifier(queue)]
        {
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

    private static var scannedGroups: Int { 8 }
}
