import Foundation

/// ``HeldWork`` for the naive baseline: stays executing until the benchmark finishes it.
final class NaiveHeldWork: NaiveCoalescibleOperation<Int>, @unchecked Sendable {
    // @unchecked: an `Operation` subclass cannot be checked. Its mutable state is the superclass's,
    // guarded by its `lock`; this subclass adds only an immutable, Sendable property.
    private let started: DispatchSemaphore

    init(
        identifier: String, started: DispatchSemaphore, callBackQueue: OperationQueue,
        completionHandler: @escaping @Sendable (Result<Int, Error>) -> Void
    ) {
        self.started = started
        super.init(identifier: identifier, callBackQueue: callBackQueue, completionHandler: completionHandler)
    }

    override func main() {
        started.signal()
    }
}
