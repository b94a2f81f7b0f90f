import Foundation

/// An operation queue that counts the operations added to it, to observe delivery hops.
public final class CountingQueue: OperationQueue, @unchecked Sendable {
    // @unchecked: adds only `added`, which is thread-safe.
    /// How many operations were added.
    public let added = Counter()

    public override func addOperation(_ op: Operation) {
        added.increment()
        super.addOperation(op)
    }
}
