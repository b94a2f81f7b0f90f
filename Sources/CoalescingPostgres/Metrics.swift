#if Postgres && Metrics
import CoalescingOperations
import Metrics

/// Records a ``PostgresCoalescer``'s cross-process outcomes through swift-metrics: pass
/// ``record(_:)`` as the coalescer's observer (or call it from yours).
///
/// - `<prefix>_runs_total` (dimension `took_over`): runs of the work in this process.
/// - `<prefix>_served_from_another_instance_total`: database steps served another instance's
///   value, the runs the fleet saved; `<prefix>_join_wait_seconds` times them.
/// - `<prefix>_failures_from_another_instance_total`, `<prefix>_database_unavailable_total`,
///   `<prefix>_publish_failures_total`: what to alert on.
public struct PostgresCoalescingMetrics: Sendable {
    private let ranHere: Counter
    private let tookOver: Counter
    private let served: Counter
    private let joinWait: Timer
    private let failures: Counter
    private let unavailable: Counter
    private let publishFailures: Counter

    /// Creates the metrics under `prefix`, with `dimensions` on each.
    ///
    /// - Parameters:
    ///   - prefix: The start of every metric's label.
    ///   - factory: The metrics backend; the one bootstrapped in `MetricsSystem` by default.
    ///   - dimensions: Added to every metric, such as the coalescer's name.
    public init(
        prefix: String = "coalescing_postgres", factory: any MetricsFactory = MetricsSystem.factory,
        dimensions: [(String, String)] = []
    ) {
        ranHere = Counter(
            label: "\(prefix)_runs_total", dimensions: dimensions + [("took_over", "false")], factory: factory)
        tookOver = Counter(
            label: "\(prefix)_runs_total", dimensions: dimensions + [("took_over", "true")], factory: factory)
        served = Counter(
            label: "\(prefix)_served_from_another_instance_total", dimensions: dimensions, factory: factory)
        joinWait = Timer(label: "\(prefix)_join_wait_seconds", dimensions: dimensions, factory: factory)
        failures = Counter(
            label: "\(prefix)_failures_from_another_instance_total", dimensions: dimensions, factory: factory)
        unavailable = Counter(label: "\(prefix)_database_unavailable_total", dimensions: dimensions, factory: factory)
        publishFailures = Counter(label: "\(prefix)_publish_failures_total", dimensions: dimensions, factory: factory)
    }

    /// Counts one event; events of the in-process coalescer are left to `CoalescingMetrics`.
    ///
    /// - Parameter event: An event from a ``PostgresCoalescer``'s observer.
    public func record(_ event: PostgresCoalescingEvent) {
        switch event {
        case .ranHere(_, let took): (took ? tookOver : ranHere).increment()
        case .servedFromAnotherProcess(_, let waited):
            served.increment()
            joinWait.recordNanoseconds(
                waited.components.seconds * 1_000_000_000 + waited.components.attoseconds / 1_000_000_000)
        case .failedInAnotherProcess: failures.increment()
        case .databaseUnavailable: unavailable.increment()
        case .publishFailed: publishFailures.increment()
        case .local, .databaseAvailableAgain: break
        }
    }
}
#endif
