import Foundation

/// ``InstantWork`` for the naive baseline: finishes with 42 as soon as it starts.
final class NaiveInstantWork: NaiveCoalescibleOperation<Int>, @unchecked Sendable {
    // @unchecked: an `Operation` subclass cannot be checked. Its mutable state is the superclass's,
    // guarded by its `lock`; this subclass adds none.

    override func main() {
        finish(result: .success(42))
    }
}
