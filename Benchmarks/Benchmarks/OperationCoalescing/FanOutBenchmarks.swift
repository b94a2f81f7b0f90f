import Benchmark

/// Workload 2, fan-out: N = 10,000 callers have joined one piece of work, which is executing;
/// measures from `finish(result:)` until the last caller's handler has run.
///
/// Callers share one serial callback queue (as UI callers share the main queue), or are spread
/// round-robin over 8 serial queues. `finish(result:)` is called on the benchmark's thread, so
/// the figure covers handing out the result and every queue hop, and ends when the last handler
/// ticks the countdown. Divide by N for the cost per caller.
///
/// The naive path hops once per caller (one `addOperation` each) through a chain of nested
/// closures as deep as N; ours hops once per distinct queue and runs the handlers in a loop.
func registerFanOutBenchmarks() {
    let joiners = 9_999  // plus the work's first caller: 10,000 callers
    for callbackQueueCount in [1, 8] {
        for path in CallerPath.allCases {
            let layout = callbackQueueCount == 1 ? "1-queue" : "\(callbackQueueCount)-queues"
            Benchmark(
                "FanOut/N=\(joiners + 1)/\(layout)/\(path.rawValue)",
                configuration: .init(maxDuration: .seconds(3), maxIterations: 60)
            ) { benchmark in
                let scenario = CoalescingScenario(
                    path: path, joiners: joiners, callbackQueueCount: callbackQueueCount, held: true)
                scenario.join(joiners)
                scenario.startHeldWork()
                benchmark.startMeasurement()
                scenario.finishSharedWork()
                benchmark.stopMeasurement()
                scenario.drain()
            }
        }
    }
}
