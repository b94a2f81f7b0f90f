import Benchmark
import BenchmarkSupport
import CoalescingOperations
import Foundation

/// What progress costs per update (issue 22): N = 100 callers wait on one running work, which
/// reports U = 10,000 updates and then finishes; the measured region runs from the first report
/// until every caller has its result.
///
/// - `ours-progress`: every caller asked for progress, on one serial callback queue; the latest
///   value wins for a caller still being handed the previous one.
/// - `no-progress`: the same callers and reports, nobody asking (the baseline): the work only
///   records its latest value.
func registerProgressBenchmarks() {
    let callers = 100
    let updates = 10_000
    for asking in [true, false] {
        Benchmark(
            "Progress/N=\(callers)/U=\(updates)/\(asking ? "ours-progress" : "no-progress")",
            configuration: .init(maxDuration: .seconds(2), maxIterations: 100)
        ) { benchmark in
            let queue = Queues.work(suspended: false)
            let callbacks = Queues.callbacks()
            let manager = OperationQueueManager(queue: queue)
            let started = DispatchSemaphore(value: 0)
            let work = HeldWork(identifier: "download", started: started)
            let countdown = Countdown(callers)
            let handler: @Sendable (Result<Int, Error>) -> Void = countdown.handler()
            // A named closure: a closure literal in the conditional crashes the type checker (Swift 6.3.1).
            let ignore: @Sendable (WorkProgress) -> Void = { _ in }
            let progress: (@Sendable (WorkProgress) -> Void)? = asking ? ignore : nil
            for _ in 0..<callers {
                manager.enqueue(
                    identifier: "download", callBackQueue: callbacks, makeOperation: { work }, progress: progress,
                    completionHandler: handler)
            }
            started.wait()

            benchmark.startMeasurement()
            for completed in 1...updates {
                work.report(progress: WorkProgress(completed: Int64(completed), total: Int64(updates)))
            }
            work.finish(result: .success(1))
            countdown.wait()
            benchmark.stopMeasurement()

            Queues.drain([queue, callbacks])
        }
    }
}
