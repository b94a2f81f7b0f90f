import CoalescingOperations
import Foundation

/// Work that finishes with 42 as soon as its queue starts it.
public final class InstantWork: CoalescibleOperation<Int>, @unchecked Sendable {
    // @unchecked: an `Operation` subclass cannot be checked. Its mutable state is the superclass's,
    // guarded by that class's lock; this subclass adds none.

    public override func main() {
        finish(result: .success(42))
    }
}
