import Foundation

/// A clock that stands still until a test moves it: give it to a coalescer's `clock:` and its
/// timeouts, stall thresholds and prefetch expiry pass when the test says, in no wall time.
///
/// `sleep(until:tolerance:)` returns once the clock has been advanced to its deadline (at once if
/// it is there already), or throws `CancellationError` when the sleeping task is cancelled.
/// ``waitForSleepers(_:)`` lets a test wait, without polling, until the coalescer has armed its
/// timers, so that advancing the clock is never a race.
public final class ManualClock: Clock, @unchecked Sendable {
    // @unchecked: `now`, `sleepers`, `armed` and `watchers` are guarded by `lock`.

    /// A point on the clock: how far it has been advanced since it was created.
    public struct Instant: InstantProtocol, Sendable {
        /// The time since the clock was created.
        public var offset: Duration

        /// Creates the instant `offset` after the clock's creation.
        public init(offset: Duration) { self.offset = offset }

        /// The instant `duration` later.
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }

        /// The time from this instant to `other`.
        public func duration(to other: Instant) -> Duration { other.offset - offset }

        /// Whether this instant comes first.
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private struct Sleeper {
        let id: Int
        let deadline: Instant
        let continuation: CheckedContinuation<Void, Error>
    }

    private let lock = NSLock()
    private var current = Instant(offset: .zero)
    private var sleepers: [Sleeper] = []
    private var nextID = 0
    /// How many sleeps ever started, for ``waitForSleepers(_:)``.
    private var armed = 0
    private var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []

    /// Creates a clock at its zero instant.
    public init() {}

    /// Where the clock stands.
    public var now: Instant { lock.withLock { current } }

    /// The smallest step: any duration can be advanced through.
    public var minimumResolution: Duration { .zero }

    /// Suspends until the clock is advanced to `deadline`.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = lock.withLock {
            nextID += 1
            return nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                let (resumeNow, ready) = lock.withLock { () -> (Bool, [CheckedContinuation<Void, Never>]) in
                    armed += 1
                    let ready = takeWatchers()
                    guard deadline > current else { return (true, ready) }
                    sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return (false, ready)
                }
                for watcher in ready { watcher.resume() }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let cancelled = lock.withLock { () -> Sleeper? in
                guard let index = sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return sleepers.remove(at: index)
            }
            cancelled?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the clock on by `duration`, waking every sleeper whose deadline it reaches, earliest
    /// first.
    public func advance(by duration: Duration) {
        let woken = lock.withLock { () -> [Sleeper] in
            current = current.advanced(by: duration)
            let woken = sleepers.filter { $0.deadline <= current }.sorted { $0.deadline < $1.deadline }
            sleepers.removeAll { $0.deadline <= current }
            return woken
        }
        for sleeper in woken { sleeper.continuation.resume() }
    }

    /// Returns once `count` sleeps in all have started on this clock: the timers a test waits for
    /// before it advances the clock past them.
    public func waitForSleepers(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = lock.withLock { () -> Bool in
                guard armed < count else { return true }
                watchers.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// The watchers whose count the sleeps have reached, removed. Under `lock`.
    private func takeWatchers() -> [CheckedContinuation<Void, Never>] {
        let ready = watchers.filter { $0.count <= armed }.map(\.continuation)
        watchers.removeAll { $0.count <= armed }
        return ready
    }
}
