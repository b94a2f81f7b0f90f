import CoalescingOperations
import Foundation

/// Work with no caller of its own that finishes with 42 as soon as it starts, then ticks
/// `countdown`: the benchmark learns that all of it ran without any callback hop.
public final class CountedWork: CoalescibleOperation<Int>, @unchecked Sendable {
    // @unchecked: adds only an immutable, Sendable property to CoalescibleOperation.
    private let countdown: Countdown

    public init(identifier: String, countdown: Countdown) {
        self.countdown = countdown
        super.init(identifier: identifier)
    }

    public override func main() {
        finish(result: .success(42))
        countdown.tick()
    }
}
