import CoalescingOperations
import Foundation

/// Work that finishes with 42 as soon as its queue starts it.
public final class InstantWork: CoalescibleOperation<Int>, @unchecked Sendable {
    // @unchecked: adds nothing to CoalescibleOperation.

    public override func main() {
        finish(result: .success(42))
    }
}
