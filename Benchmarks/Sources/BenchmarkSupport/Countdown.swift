import Dispatch
import Synchronization

/// Counts callbacks down to zero from any thread; ``wait()`` returns once the last one arrived.
///
/// Benchmarks wait on it instead of sleeping, so a measured region ends as soon as the work does.
public final class Countdown: Sendable {
    private let remaining: Atomic<Int>
    private let done = DispatchSemaphore(value: 0)

    /// Creates a countdown from `count`.
    public init(_ count: Int) {
        remaining = Atomic(count)
    }

    /// Records one arrival; the last one wakes ``wait()``.
    public func tick() {
        if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
            done.signal()
        }
    }

    /// Blocks until ``tick()`` has been called as many times as the count given at creation.
    public func wait() {
        done.wait()
    }

    /// A completion handler that ticks. Build it once, outside the measured region, and hand the
    /// same closure to every caller, as the benchmarks do.
    public func handler<Value>() -> @Sendable (Result<Value, Error>) -> Void {
        { _ in self.tick() }
    }
}
