import CoalescingOperations
import Foundation

/// Work that, once started, stays executing until the benchmark calls `finish(result:)`; signals
/// `started` when its queue has started it.
public final class HeldWork: CoalescibleOperation<Int>, @unchecked Sendable {
    // @unchecked: an `Operation` subclass cannot be checked. Its mutable state is the superclass's,
    // guarded by that class's lock; this subclass adds only an immutable, Sendable property.
    private let started: DispatchSemaphore

    /// A caller's operation: its handler runs on `callBackQueue`.
    public init(
        identifier: String, started: DispatchSemaphore, callBackQueue: OperationQueue,
        completionHandler: @escaping @Sendable (Result<Int, Error>) -> Void
    ) {
        self.started = started
        super.init(identifier: identifier, callBackQueue: callBackQueue, completionHandler: completionHandler)
    }

    /// Work with no caller of its own.
    public init(identifier: String, started: DispatchSemaphore) {
        self.started = started
        super.init(identifier: identifier)
    }

    public override func main() {
        started.signal()
    }
}
