import CoalescingOperations

/// Follows a coalescer's events in the order the observer received them, key by key, and notes
/// where the events of successive work on one key interleave (Guarantee 22): work reported
/// started while earlier work on the key is still in flight, an end or a caller's step reported
/// for a key with nothing in flight.
///
/// Forgetting a key legitimately lets new work start beside the old, so `overlaps` counts, per
/// key, how far beyond one piece the work in flight went; a test compares it with the forgets
/// that succeeded.
public struct EventOrder: Sendable {
    private var inFlight: [String: Int] = [:]
    /// Per key, the most pieces of work in flight at once, less one.
    public private(set) var overlaps: [String: Int] = [:]
    /// Steps reported for a key with nothing in flight.
    public private(set) var strays: [String] = []

    /// Starts with nothing in flight.
    public init() {}

    /// Follows one event.
    public mutating func follow(_ event: CoalescingEvent<String>) {
        switch event {
        case .workStarted(let key, _):
            inFlight[key, default: 0] += 1
            overlaps[key] = max(overlaps[key] ?? 0, inFlight[key, default: 0] - 1)
        case .workEnded(let key, _, _, _, _, _):
            if inFlight[key, default: 0] == 0 {
                strays.append("ended \(key)")
            } else {
                inFlight[key, default: 0] -= 1
            }
        case .callerJoined(let key, _, _), .callerWithdrawn(let key, _, _):
            if inFlight[key, default: 0] == 0 { strays.append("\(event) with nothing in flight") }
        case .priorityChanged, .workStalled:
            break
        }
    }

    /// The broken promises, given how many times each key was forgotten while work was in flight.
    public func problems(forgotten: [String: Int]) -> [String] {
        strays
            + overlaps.compactMap { key, overlap in
                overlap > (forgotten[key] ?? 0)
                    ? "\(overlap + 1) pieces of work on \(key) in flight at once, forgotten \(forgotten[key] ?? 0) times"
                    : nil
            }
    }
}
