import Foundation
import NaiveCoalescing

/// ``HeldWork`` for the naive baseline: stays executing until the benchmark finishes it.
public final class NaiveHeldWork: NaiveCoalescibleOperation<Int>, @unchecked Sendable {
    // @unchecked: adds only an immutable, Sendable property to NaiveCoalescibleOperation.
    private let started: DispatchSemaphore

    public init(
        identifier: String, started: DispatchSemaphore, callBackQueue: OperationQueue,
        completionHandler: @escaping @Sendable (Result<Int, Error>) -> Void
    ) {
        self.started = started
        super.init(identifier: identifier, callBackQueue: callBackQueue, completionHandler: completionHandler)
    }

    public override func main() {
        started.signal()
    }
}
