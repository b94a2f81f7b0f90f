import Foundation

/// Calls a batch of completion handlers, in order, with one result, on the queue it runs on.
final class DeliveryOperation<Value>: Operation, @unchecked Sendable {
    // @unchecked: both properties are immutable, and the queue hands the operation to one thread.
    // The handlers are not `@Sendable` (the public API accepts any closure, as Foundation's
    // completion blocks did); each one is called once, on the queue its caller asked for.
    private let handlers: ContiguousArray<(Result<Value, Error>) -> Void>
    private let result: Result<Value, Error>

    init(handlers: ContiguousArray<(Result<Value, Error>) -> Void>, result: Result<Value, Error>) {
        self.handlers = handlers
        self.result = result
    }

    override func main() {
        for handler in handlers {
            handler(result)
        }
    }
}
