/// The error a ``NaiveCoalescibleOperation`` finishes with when it is cancelled.
public enum NaiveCoalescingError: Error, Equatable, Sendable {
    case cancelled
}
