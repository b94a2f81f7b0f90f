import Foundation

/// An operation queue that counts the operations added to it, to observe delivery hops.
final class CountingQueue: OperationQueue, @unchecked Sendable {
    // @unchecked: adds only `added`, which is thread-safe.
    let added = Counter()

    override func addOperation(_ op: Operation) {
        added.increment()
        super.addOperation(op)
    }
}
