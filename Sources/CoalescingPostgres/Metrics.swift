#if Postgres && Metrics
import CoalescingOperations
import Metrics

/// Records a ``PostgresCoalescer``'s cross-process outcomes through swift-metrics; call
/// ``record(_:)`` from the coalescer's observer, beside the in-process bridges (the article
/// "Coalescing across processes" shows the one observer that feeds them all).
///
/// - `<prefix>_runs_total` (dimension `took_over`): runs of the work in this process; `took_over`
///   is `true` for each take-over of another process's run (Guarantee 30), which the coalescer
///   also logs once, at notice level.
/// - `<prefix>_served_from_another_instance_total`: database steps served another process's
///   value, the runs the fleet saved; `<prefix>_join_wait_seconds` times them from arrival.
/// - `<prefix>_failures_from_another_instance_total`: another process's failure, received.
/// - `<prefix>_database_unavailable_total`: steps that could not reach the database.
/// - `<prefix>_database_errors_total`: steps the database answered with an error.
/// - `<prefix>_publish_failures_total`: results this process could not publish.
/// - `<prefix>_locks_lost_total`: locks lost with a session while this process ran the work.
///
/// The labels say "instance" for a process of the fleet, as dashboards do.
public struct PostgresCoalescingMetrics: Sendable {
    private let ranHere: Counter
    private let tookOver: Counter
    private let served: Counter
    private let joinWait: Timer
    private let failures: Counter
    private let unavailable: Counter
    private let databaseErrors: Counter
    private let publishFailures: Counter
    private let locksLost: Counter

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
        func counter(_ name: String, _ extra: [(String, String)] = []) -> Counter {
            Counter(label: "\(prefix)_\(name)", dimensions: dimensions + extra, factory: factory)
        }
        ranHere = counter("runs_total", [("took_over", "false")])
        tookOver = counter("runs_total", [("took_over", "true")])
        served = counter("served_from_another_instance_total")
        joinWait = Timer(label: "\(prefix)_join_wait_seconds", dimensions: dimensions, factory: factory)
        failures = counter("failures_from_another_instance_total")
        unavailable = counter("database_unavailable_total")
        databaseErrors = counter("database_errors_total")
        publishFailures = counter("publish_failures_total")
        locksLost = counter("locks_lost_total")
    }

    /// Counts one event; events of the in-process coalescer are left to `CoalescingMetrics`.
    ///
    /// - Parameter event: An event from a ``PostgresCoalescer``'s observer.
    public func record(_ event: PostgresCoalescingEvent) {
        switch event {
        case .ranHere(_, let took):
            if took { tookOver.increment() } else { ranHere.increment() }
        case .servedFromAnotherProcess(_, let waited):
            served.increment()
            joinWait.recordNanoseconds(
                waited.components.seconds * 1_000_000_000 + waited.components.attoseconds / 1_000_000_000)
        case .failedInAnotherProcess: failures.increment()
        case .databaseUnavailable: unavailable.increment()
        case .databaseError: databaseErrors.increment()
        case .publishFailed: publishFailures.increment()
        case .lockLost: locksLost.increment()
        case .local, .databaseAvailableAgain, .waitingForAnotherProcess: break
        }
    }
}
#endif
