import Synchronization

/// Counts tasks arriving from anywhere; ``waitForAll()`` returns once `expected` have arrived.
public final class Arrivals: Sendable {
    private let arrived = Atomic(0)
    private let expected: Int
    private let allArrived = AsyncGate()

    /// Creates a counter that waits for `expected` arrivals.
    public init(expected: Int) {
        self.expected = expected
        if expected == 0 {
            allArrived.open()
        }
    }

    /// Records one arrival; the last one opens ``waitForAll()``.
    public func arrive() {
        if arrived.add(1, ordering: .acquiringAndReleasing).newValue == expected {
            allArrived.open()
        }
    }

    /// Returns once every expected task has arrived.
    public func waitForAll() async {
        await allArrived.wait()
    }
}
