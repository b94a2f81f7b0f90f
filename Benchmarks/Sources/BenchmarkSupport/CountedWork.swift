import CoalescingOperations
import Foundation

/// Work with no caller of its own that finishes with 42 as soon as it starts, then ticks
/// `countdown`: the benchmark learns that all of it ran without any callback hop.
public final class CountedWork: CoalescibleOperation<Int>, @unchecked Sendable {
    // @unchecked: an `Operation` subclass cannot be checked. Its mutable state is the superclass's,
    // guarded by that class's lock; this subclass adds only an immutable, Sendable property.
    private let countdown: Countdown

    /// Creates work with `identifier` that ticks `countdown` once it has finished.
    public init(identifier: String, countdown: Countdown) {
        self.countdown = countdown
        super.init(identifier: identifier)
    }

    public override func main() {
        finish(result: .success(42))
        countdown.tick()
    }
}
