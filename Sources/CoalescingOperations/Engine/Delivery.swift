import Foundation

/// Hands a settled result to callers: one hop per distinct callback queue, then the handlers
/// without one and the waiting tasks, on this thread (Guarantees 3 and 8).
///
/// A million callers on one queue cost one queue hop and a loop, not a million hops or a million
/// nested closures, and the loop runs on the callers' queue, so the stack never grows with them.
/// Joined operations finish as they are collected: before the operation that ran the work, and
/// before any handler runs.
@usableFromInline struct Delivery<Value: Sendable> {
    /// Slots of handlers: the callers' list itself, when it moves whole.
    @usableFromInline typealias Handlers = ContiguousArray<Slot<Value>>

    @usableFromInline var inline: Handlers = []
    @usableFromInline var groups: ContiguousArray<(queue: OperationQueue, handlers: Handlers)> = []
    @usableFromInline var continuations: [UnsafeContinuation<Value, Error>] = []
    /// Where each queue's group is; consulted only for callers on more than one queue.
    @usableFromInline var groupIndex: [ObjectIdentifier: Int] = [:]

    @inlinable init() {}

    @inlinable mutating func add(_ callers: Callers<Value>) {
        if case .one(let queue) = callers.queues {
            // The common case: every caller is a handler on one queue; the list moves whole.
            if let queue {
                groups.append((queue, callers.entries))
            } else {
                inline = callers.entries
            }
            return
        }
        for slot in callers.entries { add(slot.caller) }
    }

    @inlinable mutating func add(_ caller: Caller<Value>) {
        switch caller {
        case .handler(_, queue: nil):
            inline.append(Slot(caller))
        case .handler(_, queue: let queue?):
            groups[group(for: queue)].handlers.append(Slot(caller))
        case .operation(let operation):
            if let own = operation.finishJoined() { add(.handler(own, queue: operation.callBackQueue)) }
        case .parked(let continuation, _):
            continuations.append(continuation)
        case .arriving, .owed, .held, .gone:
            // Not parked: it hears as it parks. Gone: it heard already.
            break
        }
    }

    /// Hands `result` to every caller collected.
    @inlinable consuming func deliver(_ result: Result<Value, Error>) {
        for (queue, handlers) in groups {
            queue.addOperation(DeliveryOperation { Self.serve(handlers, with: result) })
        }
        Self.serve(inline, with: result)
        for continuation in continuations { continuation.resume(with: result) }
    }

    @inlinable static func serve(_ handlers: Handlers, with result: Result<Value, Error>) {
        for slot in handlers {
            if case .handler(let handler, _) = slot.caller { handler(result) }
        }
    }

    @inlinable mutating func group(for queue: OperationQueue) -> Int {
        let id = ObjectIdentifier(queue)
        if let index = groupIndex[id] { return index }
        groups.append((queue, []))
        groupIndex[id] = groups.count - 1
        return groups.count - 1
    }
}

extension Owed {
    /// Hands the caller its last call, outside any batch.
    @usableFromInline func tell() { caller.tell(result) }
}

extension Caller {
    /// Hands one caller its last call, outside any batch.
    @usableFromInline func tell(_ result: Result<Value, Error>) {
        var delivery = Delivery<Value>()
        delivery.add(self)
        delivery.deliver(result)
    }
}

/// Serves a group of handlers on the queue it is added to.
///
/// Not generic: the closure is built where the result's type is known, so the loop inside it is
/// specialized rather than run through generic metadata.
@usableFromInline final class DeliveryOperation: Operation, @unchecked Sendable {
    // @unchecked: `serve` is immutable and the queue hands the operation to one thread.
    private let serve: () -> Void

    @usableFromInline init(serve: @escaping () -> Void) { self.serve = serve }

    @usableFromInline override func main() { serve() }

    /// Does nothing: a delivery carries results its callers are owed.
    ///
    /// Foundation's `start()` skips `main()` on a cancelled operation, so a delivery that could be
    /// cancelled would lose its callers' callbacks whenever something cancels the operations on
    /// their queue: ``OperationQueueManager/cancelAll()`` when the callback queue is the manager's
    /// own, `cancelAllOperations()` on a busy callback queue, or an app clearing its own queue.
    @usableFromInline override func cancel() {}
}

extension WithdrawalReason {
    /// What a caller that left for this reason hears, whichever half it came through: a caller that
    /// withdrew itself hears `CancellationError`, one whose timeout passed ``CoalescingError/timedOut``.
    @usableFromInline var error: any Error {
        switch self {
        case .withdrawn: CancellationError()
        case .timedOut: CoalescingError.timedOut
        }
    }
}
