import Benchmark
import BenchmarkSupport
import CoalescingOperations
import Foundation

/// Workload 4, unique throughput: M = 1,000 operations that never coalesce (distinct identifiers,
/// no caller of their own) go through `OperationQueueManager.enqueue(operation:)`, or straight
/// onto an `OperationQueue` with `addOperation(_:)` (the raw baseline); measures from the first
/// enqueue until the last operation has run, building the operations included.
///
/// The work queue is concurrent and running, so the enqueuing thread and the queue's threads share
/// the 2 cores, as in an app. The difference between the two is the manager's bookkeeping: a
/// locked dictionary insert on enqueue and a removal when each operation finishes. The manager
/// and queue live for the whole benchmark, as an app's would.
func registerUniqueThroughputBenchmarks() {
    let count = 1_000
    let identifiers = (0..<count).map { "unique-\($0)" }
    for throughManager in [true, false] {
        Benchmark(
            "UniqueThroughput/M=\(count)/\(throughManager ? "manager" : "raw-queue")",
            configuration: .init(maxDuration: .seconds(3), maxIterations: 400)
        ) { benchmark, manager in
            let countdown = Countdown(count)
            benchmark.startMeasurement()
            for identifier in identifiers {
                let work = CountedWork(identifier: identifier, countdown: countdown)
                if throughManager {
                    manager.enqueue(operation: work)
                } else {
                    manager.queue.addOperation(work)
                }
            }
            countdown.wait()
            benchmark.stopMeasurement()
            Queues.drain([manager.queue])
        } setup: {
            OperationQueueManager(queue: Queues.work(suspended: false))
        }
    }
}
