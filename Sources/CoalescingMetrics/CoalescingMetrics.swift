#if Metrics
import CoalescingOperations
import CoreMetrics

/// Feeds a coalescer's events to swift-metrics: counters, a meter of the work in flight and a
/// timer of the work's duration, all with the dimension `coalescer` naming the coalescer.
///
/// Hand ``record(_:)`` to the coalescer as its observer, or call it from an observer that also
/// does other things:
///
/// ```swift
/// import CoalescingMetrics
/// import CoalescingOperations
///
/// let metrics = CoalescingMetrics(coalescer: "profiles")
/// let profiles = InFlightTaskCoalescer<String, String>(observer: metrics.record)
/// ```
///
/// | Label | Kind | Extra dimension |
/// | --- | --- | --- |
/// | `coalescing_work_started_total` | counter | |
/// | `coalescing_callers_joined_total` | counter | |
/// | `coalescing_callers_withdrawn_total` | counter | `reason`: `withdrawn`, `timed_out` |
/// | `coalescing_callers_served_total` | counter | |
/// | `coalescing_work_ended_total` | counter | `outcome`: `succeeded`, `failed`, `cancelled` |
/// | `coalescing_work_stalled_total` | counter | |
/// | `coalescing_work_in_flight` | meter | |
/// | `coalescing_work_duration` | timer | `outcome` |
///
/// Runs saved by coalescing are `callers_joined_total`: every caller that joined work in flight
/// instead of starting its own, the same count as `CoalescingStatistics.callersJoined`.
public struct CoalescingMetrics: Sendable {
    private let workStarted: Counter
    private let callersJoined: Counter
    private let callersWithdrawn: Counter
    private let callersTimedOut: Counter
    private let callersServed: Counter
    private let workStalled: Counter
    private let workInFlight: Meter
    private let ended: OutcomeMetrics

    /// Creates the coalescer's metrics once: swift-metrics backends cost a look-up per creation.
    ///
    /// - Parameters:
    ///   - coalescer: The value of the `coalescer` dimension, naming the kind of load.
    ///   - dimensions: More dimensions for every metric, such as the service's name.
    ///   - factory: The metrics backend; the one bootstrapped in `MetricsSystem` by default.
    public init(
        coalescer: String, dimensions: [(String, String)] = [], factory: any MetricsFactory = MetricsSystem.factory
    ) {
        let base = [("coalescer", coalescer)] + dimensions
        func counter(_ label: String, _ extra: [(String, String)] = []) -> Counter {
            Counter(label: label, dimensions: base + extra, factory: factory)
        }
        workStarted = counter("coalescing_work_started_total")
        callersJoined = counter("coalescing_callers_joined_total")
        callersWithdrawn = counter("coalescing_callers_withdrawn_total", [("reason", "withdrawn")])
        callersTimedOut = counter("coalescing_callers_withdrawn_total", [("reason", "timed_out")])
        callersServed = counter("coalescing_callers_served_total")
        workStalled = counter("coalescing_work_stalled_total")
        workInFlight = Meter(label: "coalescing_work_in_flight", dimensions: base, factory: factory)
        ended = OutcomeMetrics(dimensions: base, factory: factory)
    }

    /// Counts one event; hand it to the coalescer as its observer.
    ///
    /// - Parameter event: An event from a coalescer, a manager or a prefetcher.
    public func record<Key>(_ event: CoalescingEvent<Key>) {
        switch event {
        case .workStarted:
            workStarted.increment()
            workInFlight.increment()
        case .callerJoined:
            callersJoined.increment()
        case .callerWithdrawn(_, _, .withdrawn):
            callersWithdrawn.increment()
        case .callerWithdrawn(_, _, .timedOut):
            callersTimedOut.increment()
        case .priorityChanged:
            break
        case .workEnded(_, _, let outcome, _, let served, let duration):
            workInFlight.decrement()
            callersServed.increment(by: served)
            ended.record(outcome, after: duration)
        case .workStalled:
            workStalled.increment()
        }
    }
}
#endif
