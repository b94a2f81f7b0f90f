import Foundation

/// The queue manager users copy from the blog posts (seed 000): every enqueue takes a lock and
/// scans `queue.operations` for an operation with the same identifier and `Value` type.
///
/// The scan copies the queue's whole list of operations and walks it, so each enqueue costs
/// O(P) in the number of pending operations. Operations that joined others are not on the queue,
/// so the scan does not grow with the number of callers.
final class NaiveOperationQueueManager: Sendable {
    /// The queue the work runs on.
    let queue: OperationQueue

    /// Makes scan-then-add atomic, so two identical operations cannot both be added.
    private let lock = NSLock()

    init(queue: OperationQueue = OperationQueue()) {
        self.queue = queue
    }

    /// Coalesces `operation` into a matching operation on the queue, or adds it to the queue.
    func enqueue<Value: Sendable>(operation: NaiveCoalescibleOperation<Value>) {
        lock.lock()
        defer { lock.unlock() }
        if let matchingOperation = matchingCoalescibleOperation(for: operation),
            matchingOperation.coalesce(operation: operation)
        {
            return
        }
        queue.addOperation(operation)
    }

    private func matchingCoalescibleOperation<Value: Sendable>(
        for operation: NaiveCoalescibleOperation<Value>
    ) -> NaiveCoalescibleOperation<Value>? {
        queue.operations
            .lazy
            .compactMap { $0 as? NaiveCoalescibleOperation<Value> }
            .first { $0.identifier == operation.identifier }
    }
}
