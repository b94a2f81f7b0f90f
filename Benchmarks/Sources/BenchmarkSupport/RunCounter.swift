import Synchronization

/// Counts how many times a piece of work started, to check that every caller coalesced.
public final class RunCounter: Sendable {
    private let runs = Atomic(0)

    /// Creates a counter at zero.
    public init() {}

    /// Records one run.
    public func increment() {
        runs.add(1, ordering: .relaxed)
    }

    /// The runs recorded so far.
    public var count: Int {
        runs.load(ordering: .relaxed)
    }
}
