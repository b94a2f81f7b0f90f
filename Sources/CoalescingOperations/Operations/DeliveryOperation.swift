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
}
