import Benchmark

/// Workload 1, joining: one piece of work is held pending on a suspended queue while N callers
/// join it, through each ``CallerPath``.
///
/// Measures the N joins only: building the queues and the work happens before the measured
/// region, running the work and calling every caller back after it. Figures are per iteration;
/// divide by N for the cost of one join (`Scripts/ratios.py` does). Joining is what every caller
/// but the first pays, so it should cost the same for the 100,000th caller as for the 10th.
///
/// The naive path stops at N = 10,000: at finish, its chain of 100,000 nested completion closures
/// overflows the callback thread's 8 MB stack and the process crashes (see BENCHMARKS.md).
func registerJoinBenchmarks() {
    for joiners in [10, 1_000, 10_000, 100_000] {
        for path in CallerPath.allCases where !(path == .naive && joiners > 10_000) {
            Benchmark(
                "Join/N=\(joiners)/\(path.rawValue)",
                configuration: .init(maxDuration: .seconds(2), maxIterations: 1_000_000 / joiners)
            ) { benchmark in
                let scenario = CoalescingScenario(path: path, joiners: joiners)
                benchmark.startMeasurement()
                scenario.join(joiners)
                benchmark.stopMeasurement()
                scenario.runToCompletion()
            }
        }
    }
}

/// Workload 1, joining among pending work: N = 100 callers join one piece of work while P other
/// operations are pending on the same queue.
///
/// Measures the 100 joins only, as ``registerJoinBenchmarks()``. The shared work is enqueued after
/// the P others, so the naive scan walks past all of them; ours finds it with one dictionary
/// look-up, so its figure should not move with P.
func registerJoinAmongPendingBenchmarks() {
    let joiners = 100
    for pending in [10, 1_000, 10_000] {
        for path in CallerPath.allCases {
            Benchmark(
                "JoinAmongPending/P=\(pending)/N=\(joiners)/\(path.rawValue)",
                configuration: .init(maxDuration: .seconds(2), maxIterations: pending >= 10_000 ? 30 : 500)
            ) { benchmark in
                let scenario = CoalescingScenario(path: path, joiners: joiners, pending: pending)
                benchmark.startMeasurement()
                scenario.join(joiners)
                benchmark.stopMeasurement()
                scenario.runToCompletion()
            }
        }
    }
}
