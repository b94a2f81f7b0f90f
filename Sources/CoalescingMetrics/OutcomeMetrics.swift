#if Metrics
import CoalescingOperations
import CoreMetrics

/// The count and the timer of ended work, one pair per outcome, made once so that recording an
/// end looks nothing up.
struct OutcomeMetrics: Sendable {
    private let succeeded: (count: Counter, duration: Timer)
    private let failed: (count: Counter, duration: Timer)
    private let cancelled: (count: Counter, duration: Timer)

    init(dimensions: [(String, String)], factory: any MetricsFactory) {
        func pair(_ outcome: String) -> (count: Counter, duration: Timer) {
            let dimensions = dimensions + [("outcome", outcome)]
            return (
                Counter(label: "coalescing_work_ended_total", dimensions: dimensions, factory: factory),
                Timer(label: "coalescing_work_duration", dimensions: dimensions, factory: factory)
            )
        }
        succeeded = pair("succeeded")
        failed = pair("failed")
        cancelled = pair("cancelled")
    }

    func record(_ outcome: WorkOutcome, after duration: Duration) {
        let metrics =
            switch outcome {
            case .succeeded: succeeded
            case .failed: failed
            case .cancelled: cancelled
            }
        metrics.count.increment()
        let (seconds, attoseconds) = duration.components
        metrics.duration.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
#endif
