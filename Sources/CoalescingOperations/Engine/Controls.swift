import Foundation

/// Why a caller heard no result from the work, on either half: the work was cancelled, or the
/// caller's own timeout passed.
///
/// The one rule (Guarantee 11): the work cancelled for everyone is ``cancelled``; a caller that
/// withdrew itself (its task cancelled, its handle withdrawn, its joined operation cancelled)
/// hears `CancellationError`, as any cancelled Swift task does; a caller whose timeout passed hears
/// ``timedOut``.
public enum CoalescingError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The work was cancelled for all its callers: by `cancel(identifier:)`, `cancel(key:)`,
    /// `cancelAll()`, or the `cancel()` of the operation that runs it.
    case cancelled
    /// The caller's own timeout passed first: that caller alone was withdrawn, and the work went on
    /// for the others (or as its ``AbandonedWorkPolicy`` says, if it was the last).
    case timedOut

    /// "the work was cancelled" or "the caller's timeout passed".
    public var description: String {
        switch self {
        case .cancelled: "the work was cancelled"
        case .timedOut: "the caller's timeout passed"
        }
    }
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

/// The timers, the environment and the runtime's escalation: each in one place.
enum Controls {
    /// A duration this long or longer is never reached: ~292 years, the most nanoseconds a
    /// dispatch deadline can hold.
    static let never = Duration.nanoseconds(Int64.max)

    /// Runs `action` once `delay` has passed on the wall's clock, on a global dispatch queue: at once
    /// for zero or less, never for ``never`` or more. The continuous clock's timers, without a task
    /// each: a timeout armed through a task and its sleep cost a caller ~5 µs and 4 allocations
    /// more (BENCHMARKS.md).
    static func schedule(after delay: Duration, _ action: @escaping @Sendable () -> Void) {
        guard delay < never else { return }
        let (seconds, attoseconds) = delay.components
        // Below `never`, so this fits: seconds < 2^63 / 10^9.
        let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(max(0, nanoseconds))), execute: action)
    }

    /// The stall threshold set by the environment variable `COALESCING_STALL_THRESHOLD_SECONDS`, in
    /// seconds, read once per process. A number of seconds too large to schedule means never. A
    /// value that is not a number of seconds, zero or more, is ignored with one line on standard
    /// error: a setting must never stop an app.
    static let environmentStallThreshold: Duration? = {
        let name = "COALESCING_STALL_THRESHOLD_SECONDS"
        guard let text = ProcessInfo.processInfo.environment[name] else { return nil }
        guard let seconds = Double(text), seconds.isFinite, seconds >= 0 else {
            warn("ignoring \(name)=\(text): not a number of seconds, zero or more")
            return nil
        }
        return seconds * 1e9 < Double(Int64.max) ? .nanoseconds(Int64(seconds * 1e9)) : never
    }()

    /// Writes one line to standard error.
    static func warn(_ message: String) {
        FileHandle.standardError.write(Data("CoalescingOperations: \(message)\n".utf8))
    }

    /// Raises `task`'s priority, on runtimes that can (Swift 6.2 and later). Tasks can only be
    /// escalated, never lowered.
    static func escalate(_ task: Task<Void, Never>, to priority: TaskPriority) {
        #if compiler(>=6.2)
        if #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) {
            task.escalatePriority(to: priority)
        }
        #endif
    }
}

/// The clock a coalescer's time runs on, given to its `clock:`: what the storage reads as now, and
/// how it arms its timers (timeouts, stall thresholds, prefetch expiry). The machine never reads
/// it: the storage reads it before taking the lock (a clock may be user code) and passes the time
/// into the events that need it; a timer's firing is an event of its own.
///
/// Time is a `Duration` since the coalescer was created rather than the clock's `Instant`: an
/// instant's layout is unknown to the machine, and a phase holding one was read through the
/// runtime's value witnesses at every event (a handler join ~110 instructions more).
@usableFromInline struct EngineClock: Sendable {
    /// The time since the coalescer was created.
    @usableFromInline let now: @Sendable () -> Duration
    /// Runs an action once a delay has passed on the clock: at once for zero or less, never for
    /// ``Controls/never`` or more. Nothing is scheduled for callers that set no timeout, so they
    /// pay nothing for the feature. The action is never cancelled: it finds out for itself whether
    /// it still matters.
    @usableFromInline let schedule: @Sendable (Duration, @escaping @Sendable () -> Void) -> Void

    init<C: Clock>(_ clock: C) where C.Duration == Duration {
        guard !(clock is ContinuousClock) else {
            // The default: read without generics, and its timers on dispatch, with no task each.
            let origin = ContinuousClock.now
            now = { .now - origin }
            schedule = { delay, action in Controls.schedule(after: delay, action) }
            return
        }
        // Any other clock: each timer a task that sleeps on it.
        let origin = clock.now
        now = { origin.duration(to: clock.now) }
        schedule = { delay, action in
            guard delay < Controls.never else { return }
            // Fixed now, so that a timer whose task starts late still fires at its time.
            let deadline = clock.now.advanced(by: max(delay, .zero))
            Task.detached {
                do {
                    try await clock.sleep(until: deadline, tolerance: nil)
                    action()
                } catch {}
            }
        }
    }
}

/// What the prefetchers of work that stored its value hear: that it is stored, not the value, which
/// is its consumer's alone, so that nothing on the way to them keeps it once it is dropped
/// (Guarantee 15). Only a prefetcher waits for such work, and it returns when it hears this.
@usableFromInline struct StoredForAConsumer: Error {
    @inlinable init() {}
}
