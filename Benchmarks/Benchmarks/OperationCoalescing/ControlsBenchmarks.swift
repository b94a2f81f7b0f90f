import Benchmark
import BenchmarkSupport
import CoalescingOperations
import Foundation

/// What the controls and the observer cost a joining caller (issues 12 and 13): N = 1,000 callers
/// join pending work through `enqueue(identifier:…)`, as in ``registerJoinBenchmarks()``, with
///
/// - `plain`: no observer, no timeout (the baseline of this group, and the same join as
///   `Join/N=1000/ours-handler`);
/// - `observer`: a manager with an observer that does nothing, so that only the library's side of
///   recording and delivering the events is measured;
/// - `timeout`: each caller gives a timeout, far enough off (an hour) never to fire.
///
/// Measures the N joins only; the work finishes and every caller is called back after.
func registerControlsBenchmarks() {
    let joiners = 1_000
    for variant in JoinVariant.allCases {
        Benchmark(
            "JoinControls/N=\(joiners)/\(variant.rawValue)",
            configuration: .init(maxDuration: .seconds(2), maxIterations: 300)
        ) { benchmark in
            let queue = Queues.work(suspended: true)
            let callbacks = Queues.callbacks()
            let manager =
                variant == .observer
                ? OperationQueueManager(queue: queue, observer: { _ in }) : OperationQueueManager(queue: queue)
            let countdown = Countdown(joiners + 1)
            let handler: @Sendable (Result<Int, Error>) -> Void = countdown.handler()
            let timeout: Duration? = variant == .timeout ? .seconds(3600) : nil
            let make = { () -> CoalescibleOperation<Int> in InstantWork(identifier: "shared") }
            manager.enqueue(
                identifier: "shared", callBackQueue: callbacks, makeOperation: make, completionHandler: handler)

            benchmark.startMeasurement()
            for _ in 0..<joiners {
                manager.enqueue(
                    identifier: "shared", callBackQueue: callbacks, timeout: timeout, makeOperation: make,
                    completionHandler: handler)
            }
            benchmark.stopMeasurement()

            queue.isSuspended = false
            countdown.wait()
            Queues.drain([queue, callbacks])
        }
    }
}

/// The ways ``registerControlsBenchmarks()`` joins.
enum JoinVariant: String, CaseIterable {
    case plain
    case observer
    case timeout
}
