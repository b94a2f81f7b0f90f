/// The error a ``NaiveCoalescibleOperation`` finishes with when it is cancelled.
enum NaiveCoalescingError: Error, Equatable, Sendable {
    case cancelled
}
