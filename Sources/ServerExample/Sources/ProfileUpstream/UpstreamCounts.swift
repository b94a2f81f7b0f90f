/// What the upstream has done: every request it took is a load, counted once when it starts and
/// once when it ends.
public struct UpstreamCounts: Sendable, Equatable {
    /// Loads started: requests that reached the upstream.
    public var started = 0
    /// Loads answered.
    public var answered = 0
    /// Loads whose client went away before the answer: the coalesced work that asked was cancelled.
    public var cancelled = 0

    /// Creates counts at zero.
    public init() {}
}
