import Foundation

/// An operation that knows how to enter an ``OperationQueueManager`` whatever its `Value` type,
/// so that `enqueue(_:)` can coalesce a ``CoalescibleOperation`` it only sees as an `Operation`.
protocol ManagerEnqueueable: Operation {
    func enqueue(on manager: OperationQueueManager)
}
