// The first example of issue 20, as a new user wrote it: a handler that counts the callers served,
// on a concurrent callback queue. Each handler runs on its own thread, so `served += 1` is a data
// race; Swift 6 must refuse to compile it.
import CoalescingOperations
import Foundation

final class GreetingOperation: CoalescibleOperation<String>, @unchecked Sendable {
    // @unchecked: restated as Swift requires of an `Operation` subclass; adds nothing.
    init() {
        super.init(identifier: "greeting")
    }

    override func main() {
        finish(result: .success("Hello"))
    }
}

/// Counts the callers served, racing: each handler runs on a thread of `callbacks`.
func countCallersServed(through manager: OperationQueueManager) -> Int {
    let callbacks = OperationQueue()
    var served = 0
    for _ in 0..<3 {
        manager.enqueue(identifier: "greeting", callBackQueue: callbacks, makeOperation: { GreetingOperation() }) { _ in
            served += 1
        }
    }
    callbacks.waitUntilAllOperationsAreFinished()
    return served
}

print(countCallersServed(through: OperationQueueManager()))
