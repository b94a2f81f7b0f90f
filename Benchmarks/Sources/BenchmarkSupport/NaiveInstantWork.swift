import Foundation
import NaiveCoalescing

/// ``InstantWork`` for the naive baseline: finishes with 42 as soon as it starts.
public final class NaiveInstantWork: NaiveCoalescibleOperation<Int>, @unchecked Sendable {
    // @unchecked: adds nothing to NaiveCoalescibleOperation.

    public override func main() {
        finish(result: .success(42))
    }
}
