import Benchmark

/// Workload 3, distinct work: one caller enqueues work with a new identifier while P operations
/// are pending on a suspended queue; measures that one `enqueue(operation:)` call. The operation
/// is built before the measured region: building it costs the same whatever P is, and its
/// allocations would only blur what grows with P.
///
/// New work cannot coalesce, so this is the price of looking for a match and registering the
/// work: one dictionary look-up and insert for ours, a copy and a scan of `queue.operations` for
/// the naive manager; both then add the operation to the queue. Ours should be flat in P. Only
/// the `enqueue(operation:)` path is measured: when nothing is in flight, the handler path builds
/// an operation and enqueues it the same way.
///
/// A third variant adds the same operation straight to the queue with `addOperation(_:)`, with the
/// same P operations pending: Foundation's own share, so that the manager's can be told apart.
func registerDistinctWorkBenchmarks() {
    for pending in [10, 1_000, 10_000] {
        for path in [CallerPath.oursOperation, .naive] {
            Benchmark(
                "DistinctWork/P=\(pending)/\(path.rawValue)",
                configuration: .init(maxDuration: .seconds(2), maxIterations: pending >= 10_000 ? 40 : 1_000)
            ) { benchmark in
                let scenario = CoalescingScenario(path: path, joiners: 0, pending: pending)
                scenario.makeDistinctWork()
                benchmark.startMeasurement()
                scenario.enqueueDistinctWork()
                benchmark.stopMeasurement()
                scenario.runToCompletion()
            }
        }
        Benchmark(
            "DistinctWork/P=\(pending)/raw-queue",
            configuration: .init(maxDuration: .seconds(2), maxIterations: pending >= 10_000 ? 40 : 1_000)
        ) { benchmark in
            let scenario = CoalescingScenario(path: .oursOperation, joiners: 0, pending: pending)
            scenario.makeDistinctWork()
            benchmark.startMeasurement()
            scenario.addDistinctWorkToQueue()
            benchmark.stopMeasurement()
            scenario.runToCompletion()
        }
    }
}
