import Foundation

/// Why a caller stopped waiting before the work ended, when it was not cancelled.
public enum CoalescingError: Error, Equatable, Sendable {
    /// The caller's own timeout passed first: that caller alone was withdrawn, and the work went on
    /// for the others (or as its ``AbandonedWorkPolicy`` says, if it was the last).
    case timedOut
}

/// What happens to work when its last caller withdraws (or times out).
///
/// Cancelling is right for a read nobody wants any more. It is wrong for a write, an upload or a
/// cache warm-up, whose effect matters even when nobody waits for the answer:
///
/// - ``CoalescibleOperation``: set or override ``CoalescibleOperation/abandonedWorkPolicy``.
/// - Task coalescers: pass `whenAbandoned:` to the call that starts the work.
public enum AbandonedWorkPolicy: Sendable, Equatable {
    /// Cancel the work. The default.
    case cancel
    /// Let the work run to its end with nobody waiting. Callers who arrive while it still runs join
    /// it as usual.
    case runToCompletion
}

/// Runs `action` once `timeout` has passed, on a global dispatch queue.
///
/// Nothing is scheduled for callers that set no timeout, so they pay nothing for the feature. The
/// action is never cancelled: it must find out for itself whether its caller is still waiting.
/// A zero or negative `timeout` runs it at once (on that queue); one longer than anything a
/// dispatch deadline can hold (about 292 years) means never, and schedules nothing.
func schedule(after timeout: Duration, _ action: @escaping @Sendable () -> Void) {
    guard let nanoseconds = timeout.schedulableNanoseconds else { return }
    DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds), execute: action)
}

extension Duration {
    /// The duration in whole nanoseconds for a dispatch deadline: 0 when zero or negative, nil
    /// when too long for one, which callers take as "never".
    var schedulableNanoseconds: Int? {
        guard self > .zero else { return 0 }
        let (seconds, attoseconds) = components
        let (whole, overflowed) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (total, overflowedAgain) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        guard !overflowed, !overflowedAgain else { return nil }
        return Int(exactly: total)
    }
}
