import Benchmark

/// Workload 9, coalesced HTTP requests (issue 40): `CoalescingURLSession` against a plain
/// `URLSession`, both sending to the same in-process stub (``InstantStub``), which answers at once.
/// Wall-clock time and malloc calls, medians per iteration, and the requests the stub answered per
/// iteration (`requests`).
let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .mallocCountTotal, requestsMetric], warmupIterations: 1)

    registerHTTPRequestBenchmarks()
}
