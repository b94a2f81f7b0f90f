import Foundation

/// Serves a batch of callers on the queue it is added to, by running a closure that calls their
/// handlers in order.
///
/// Not generic: the closure is built where the result's type is known, so the loop inside it is
/// specialized rather than run through generic metadata.
@usableFromInline
final class DeliveryOperation: Operation, @unchecked Sendable {
    // @unchecked: `serve` is immutable and the queue hands the operation to one thread. The
    // handlers it calls are not `@Sendable` (the public API accepts any closure, as Foundation's
    // completion blocks do); each one is called once, on the queue its caller asked for.
    private let serve: () -> Void

    @usableFromInline
    init(serve: @escaping () -> Void) {
        self.serve = serve
    }

    @usableFromInline
    override func main() {
        serve()
    }

    /// Does nothing: a delivery carries results its callers are owed.
    ///
    /// Foundation's `start()` skips `main()` on a cancelled operation, so a delivery that could be
    /// cancelled would lose its callers' callbacks whenever something cancels the operations on
    /// their queue: ``OperationQueueManager/cancelAll()`` when the callback queue is the manager's
    /// own, `cancelAllOperations()` on a busy callback queue, or an app clearing its own queue.
    @usableFromInline
    override func cancel() {}
}
