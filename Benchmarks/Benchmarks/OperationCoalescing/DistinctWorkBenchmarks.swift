import Benchmark

/// Workload 3, distinct work: one caller enqueues work with a new identifier while P operations
/// are pending on a suspended queue; measures that one enqueue (building its operation included).
///
/// New work cannot coalesce, so this is the price of looking for a match: one dictionary look-up
/// for ours, a copy and a scan of `queue.operations` for the naive manager. Ours should be flat
/// in P. Only the `enqueue(operation:)` path is measured: the handler path builds and enqueues an
/// operation the same way when nothing is in flight.
func registerDistinctWorkBenchmarks() {
    for pending in [10, 1_000, 10_000] {
        for path in [CallerPath.oursOperation, .naive] {
            Benchmark(
                "DistinctWork/P=\(pending)/\(path.rawValue)",
                configuration: .init(maxDuration: .seconds(2), maxIterations: pending >= 10_000 ? 40 : 1_000)
            ) { benchmark in
                let scenario = CoalescingScenario(path: path, joiners: 0, pending: pending)
                benchmark.startMeasurement()
                scenario.enqueueDistinctWork()
                benchmark.stopMeasurement()
                scenario.runToCompletion()
            }
        }
    }
}
