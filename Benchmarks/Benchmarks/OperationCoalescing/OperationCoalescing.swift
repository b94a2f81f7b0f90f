import Benchmark

/// Workloads 1-4 and 6: `OperationQueueManager` against the blog's naive manager and a raw
/// `OperationQueue`. Every benchmark measures wall-clock time and malloc calls; medians per
/// iteration are reported, and `Scripts/ratios.py` divides them per caller and sets each against
/// its baseline.
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(metrics: [.wallClock, .mallocCountTotal], warmupIterations: 1)

    registerJoinBenchmarks()
    registerJoinAmongPendingBenchmarks()
    registerFanOutBenchmarks()
    registerDistinctWorkBenchmarks()
    registerUniqueThroughputBenchmarks()
    registerControlsBenchmarks()
    registerJoinMemoryBenchmarks()
    registerProgressBenchmarks()
}
