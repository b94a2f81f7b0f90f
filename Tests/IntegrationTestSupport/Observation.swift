import CoalescingOperations

/// Test equipment: what a coalescer's observer saw, to wait on: callers that arrived (started or
/// joined work), callers that withdrew (cancelled or timed out), and work that ended. A caller can
/// be served before the event that the work ended reaches the observer: wait for ``ended``.
public struct Observation: Sendable {
    /// Advanced once per caller that started or joined work.
    public let arrivals = Threshold()
    /// Advanced once per caller that withdrew.
    public let withdrawals = Threshold()
    /// Advanced once per piece of work that ended.
    public let ended = Threshold()

    /// Creates an observation with nothing seen.
    public init() {}

    /// An observer for a coalescer: hands each event to `record`, then counts it.
    ///
    /// - Parameter record: The bridge under test.
    /// - Returns: The observer.
    public func observer(
        _ record: @escaping @Sendable (CoalescingEvent<String>) -> Void = { _ in }
    ) -> @Sendable (CoalescingEvent<String>) -> Void {
        { [arrivals, withdrawals, ended] event in
            record(event)
            switch event {
            case .workStarted, .callerJoined: arrivals.advance()
            case .callerWithdrawn: withdrawals.advance()
            case .workEnded: ended.advance()
            default: break
            }
        }
    }

    /// Runs a burst of `callers` through `coalescer`, in which caller 1 is cancelled and caller 2
    /// times out before the work, `result`, ends.
    ///
    /// - Parameters:
    ///   - callers: How many callers; at least 3.
    ///   - coalescer: A coalescer whose observer is ``observer(_:)``.
    ///   - result: What the work returns or throws once released.
    /// - Returns: The callers' tasks, all of them ended or ending with the work's outcome.
    /// - Throws: `CancellationError` if the test is cancelled meanwhile.
    public func burstWithTwoCallersLeaving<Value: Sendable>(
        of callers: Int, through coalescer: InFlightTaskCoalescer<String, Value>,
        result: @escaping @Sendable () throws -> Value
    ) async throws -> [Task<Value, any Error>] {
        let (tasks, release) = try await burst(of: callers, arrivals: arrivals) { index, work in
            try await coalescer.value(key: "ada", timeout: index == 2 ? .milliseconds(1) : nil) {
                try await work()
                return try result()
            }
        }
        tasks[1].cancel()
        try await withdrawals.wait(until: 2)
        release.advance()
        return tasks
    }
}
