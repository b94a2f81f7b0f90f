#if Logging
import CoalescingOperations
import Logging

/// Turns a coalescer's events into structured swift-log records: stall reports, withdrawals and
/// work that failed or was cancelled, each with the coalescer's name and the work's key as metadata.
///
/// Hand ``record(_:)`` to the coalescer as its observer, or call it from an observer that also
/// does other things:
///
/// ```swift
/// import CoalescingLogging
/// import CoalescingOperations
/// import Logging
///
/// let logging = CoalescingLogging(coalescer: "profiles", logger: Logger(label: "server"))
/// let profiles = InFlightTaskCoalescer<String, String>(observer: logging.record)
/// ```
///
/// | Event | Level | Message | Metadata besides `coalescer`, `key` and `work` |
/// | --- | --- | --- | --- |
/// | work stalled | warning | `coalesced work stalled` | `callers`, `elapsed_ms` |
/// | caller timed out | notice | `caller withdrew` | `reason`: `timed_out` |
/// | caller withdrew | info | `caller withdrew` | `reason`: `withdrawn` |
/// | work failed | warning | `coalesced work ended` | `outcome`, `error`, `callers_served`, `duration_ms` |
/// | work cancelled | info | `coalesced work ended` | `outcome`, `callers_served`, `duration_ms` |
/// | work succeeded | debug | `coalesced work ended` | the same |
/// | work started, caller joined, priority changed | trace | `coalesced work started`… | `callers`, `priority` |
///
/// `work` is the number the coalescer's events give the work: every record of one work carries the
/// same, as does the `coalescing.work` attribute of its span in `CoalescingTracing`. `error` is
/// the failed work's error as it prints (`String(describing:)`), so that the record says why.
///
/// The records are the coalescer's, not a request's: the observer runs on whichever thread made
/// the change, so the logger's own metadata, not a task-local one, is what reaches them.
public struct CoalescingLogging: Sendable {
    private let logger: Logger

    /// Creates the bridge.
    ///
    /// - Parameters:
    ///   - coalescer: The value of the `coalescer` metadata, naming the kind of load.
    ///   - logger: Where the records go; its level filters them as usual.
    public init(coalescer: String, logger: Logger) {
        var logger = logger
        logger[metadataKey: "coalescer"] = .string(coalescer)
        self.logger = logger
    }

    /// Logs one event; hand it to the coalescer as its observer.
    ///
    /// - Parameter event: An event from a coalescer, a manager or a prefetcher.
    public func record<Key>(_ event: CoalescingEvent<Key>) {
        switch event {
        case .workStalled(let key, let work, let callers, let elapsed):
            logger.warning(
                "coalesced work stalled",
                metadata: [
                    "key": "\(key)", "work": "\(work)", "callers": "\(callers)",
                    "elapsed_ms": "\(elapsed.milliseconds)",
                ])
        case .callerWithdrawn(let key, let work, let reason):
            logger.log(
                level: reason == .timedOut ? .notice : .info, "caller withdrew",
                metadata: [
                    "key": "\(key)", "work": "\(work)", "reason": "\(reason == .timedOut ? "timed_out" : "withdrawn")",
                ])
        case .workEnded(let key, let work, let outcome, let error, let served, let duration):
            var metadata: Logger.Metadata = [
                "key": "\(key)", "work": "\(work)", "outcome": "\(outcome)", "callers_served": "\(served)",
                "duration_ms": "\(duration.milliseconds)",
            ]
            if let error {
                metadata["error"] = "\(error)"
            }
            logger.log(level: outcome.level, "coalesced work ended", metadata: metadata)
        case .workStarted(let key, let work):
            logger.trace("coalesced work started", metadata: ["key": "\(key)", "work": "\(work)"])
        case .callerJoined(let key, let work, let callers):
            logger.trace(
                "caller joined coalesced work", metadata: ["key": "\(key)", "work": "\(work)", "callers": "\(callers)"])
        case .priorityChanged(let key, let work, let priority):
            logger.trace(
                "coalesced work priority changed",
                metadata: ["key": "\(key)", "work": "\(work)", "priority": "\(priority)"])
        }
    }
}

extension WorkOutcome {
    /// Failures are worth a look, cancellations follow withdrawals, successes are routine.
    fileprivate var level: Logger.Level {
        switch self {
        case .failed: .warning
        case .cancelled: .info
        case .succeeded: .debug
        }
    }
}

extension Duration {
    /// Whole milliseconds, as log metadata carries them.
    fileprivate var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
#endif
