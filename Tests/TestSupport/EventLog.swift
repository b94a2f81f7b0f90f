import CoalescingOperations

/// A coalescer's events, in the order its observer received them: the tests' one event log, for a
/// manager (whose events name identifiers) and for a task coalescer keyed by strings alike.
public final class EventLog: Sendable {
    /// Every event received.
    public let events = LockedBox<[CoalescingEvent<String>]>([])
    /// Opens once per stall report.
    public let stalled = Gate()

    /// An empty log.
    public init() {}

    /// The observer to give the coalescer.
    public var observer: @Sendable (CoalescingEvent<String>) -> Void { { [self] event in observe(event) } }

    private func observe(_ event: CoalescingEvent<String>) {
        events.mutate { $0.append(event) }
        if case .workStalled = event { stalled.open() }
    }

    /// Each event as a step, without its key, work number or duration, to compare with what a test
    /// expects: `started`, `joined 2`, `withdrawn timedOut`, `priority …`, `ended succeeded 2`,
    /// `stalled 1`.
    public var steps: [String] {
        events.value.map { event in
            switch event {
            case .workStarted: "started"
            case .callerJoined(_, _, let callers): "joined \(callers)"
            case .callerWithdrawn(_, _, let reason): "withdrawn \(reason)"
            case .priorityChanged(_, _, let priority): "priority \(priority)"
            case .workEnded(_, _, let outcome, _, let served, _): "ended \(outcome) \(served)"
            case .workStalled(_, _, let callers, _): "stalled \(callers)"
            }
        }
    }

    /// Each event's kind alone: the first word of its step.
    public var kinds: [String] { steps.map { String($0.prefix { $0 != " " }) } }

    /// Where the events of successive work on one key interleave (Guarantee 22), with no key
    /// forgotten: see ``EventOrder``.
    public var interleavings: [String] {
        var order = EventOrder()
        for event in events.value { order.follow(event) }
        return order.problems(forgotten: [:])
    }
}
