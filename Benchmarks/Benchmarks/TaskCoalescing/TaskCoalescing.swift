import Benchmark

/// Workload 5: `InFlightTaskCoalescer` and `PrefetchableTaskCoalescer` against the seed-001
/// `[Key: Task]` actor. Wall-clock time and malloc calls, medians per iteration; per-waiter
/// figures and ratios come from `Scripts/ratios.py`.
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(metrics: [.wallClock, .mallocCountTotal], warmupIterations: 1)

    registerTaskJoinBenchmarks()
    registerCancelledWaiterBenchmarks()
}
