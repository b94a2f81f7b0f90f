import CoalescingLogging
import CoalescingMetrics
import CoalescingOperations
import CoreMetrics
import Logging
import Tracing

/// Where the server's metrics, logs and traces go: the backends bootstrapped for the process by
/// default, or the ones a test hands in.
public struct Observability: Sendable {
    /// The logger of the server and of its coalesced work.
    public var logger: Logger
    /// The metrics backend of the coalescer's counters and timers.
    public var metrics: any MetricsFactory
    /// The tracer of the callers' and the work's spans.
    public var tracer: any Tracer

    /// Gathers the backends.
    ///
    /// - Parameters:
    ///   - logger: The logger; one labelled `profile-server` by default.
    ///   - metrics: The metrics backend; `MetricsSystem.factory` by default.
    ///   - tracer: The tracer; `InstrumentationSystem.tracer` by default.
    public init(
        logger: Logger = Logger(label: "profile-server"),
        metrics: any MetricsFactory = MetricsSystem.factory,
        tracer: any Tracer = InstrumentationSystem.tracer
    ) {
        self.logger = logger
        self.metrics = metrics
        self.tracer = tracer
    }

    /// One observer that feeds a coalescer's events to the metrics and the logs, then to `also`.
    func observer<Key>(
        coalescer: String, also: (@Sendable (CoalescingEvent<Key>) -> Void)?
    ) -> @Sendable (CoalescingEvent<Key>) -> Void {
        let metrics = CoalescingMetrics(coalescer: coalescer, factory: metrics)
        let logging = CoalescingLogging(coalescer: coalescer, logger: logger)
        return { event in
            metrics.record(event)
            logging.record(event)
            also?(event)
        }
    }
}
