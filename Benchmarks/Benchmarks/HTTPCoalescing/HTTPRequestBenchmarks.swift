import Benchmark
import CoalescingHTTP
import CoalescingOperations
import Foundation
import Synchronization

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The requests the stub answered during an iteration.
let requestsMetric = BenchmarkMetric.custom("requests", polarity: .prefersSmaller, useScalingFactor: false)

/// Workload 9: one request, and ten identical concurrent ones, sent through a plain `URLSession`
/// and through `CoalescingURLSession`, to a stub that answers at once.
///
/// - `HTTP/N=1/plain-urlsession`: `URLSession.data(for:)`, one request per iteration: the baseline.
/// - `HTTP/N=1/coalescing`: the same request through `CoalescingURLSession.data(for:)`, one caller:
///   set against the baseline, the time coalescing adds to a caller when nothing is shared (the
///   key, the coalescer's bookkeeping, the detached task, the session delegate that reads the body).
/// - `HTTP/N=10/coalescing`: ten child tasks ask for the same request at once through
///   `CoalescingURLSession`: one request (`requests` says how many the stub answered).
/// - `HTTP/N=10/plain-urlsession`: the same ten callers, each with a request of its own.
/// - `HTTP/N=1/task-coalescer-over-plain`: a diagnostic, not a front-end: the plain request run as
///   an `InFlightTaskCoalescer`'s work, one caller. It splits the added time of `N=1/coalescing`
///   into the coalescer's share (its detached task, a hop to another thread and back) and the
///   rest (the key, and reading the response through the session's delegate, one delegate-queue
///   operation per callback, where the plain request has one completion handler).
/// - `HTTP/N=1/key-alone`: a diagnostic: what `data(for:)` computes before it reaches the
///   coalescer, the request's key and its description (the work's task name), and nothing else.
///
/// The measured region runs from the first caller asking until every caller holds the body. The
/// sessions are created once, before the iterations.
func registerHTTPRequestBenchmarks() {
    let plain = URLSession(configuration: InstantStub.configuration())
    let http = CoalescingURLSession(configuration: InstantStub.configuration())
    let request = InstantStub.request
    let coalescer = InFlightTaskCoalescer<Int, Data>()

    // Up to 2 s each: on a shared machine a longer run averages over the neighbours' bursts.
    let configuration = Benchmark.Configuration(maxDuration: .seconds(2), maxIterations: 50_000)
    for callers in [1, 10] {
        Benchmark("HTTP/N=\(callers)/plain-urlsession", configuration: configuration) { benchmark in
            await measure(benchmark, callers: callers) { _ = try await plain.data(for: request) }
        }
        Benchmark("HTTP/N=\(callers)/coalescing", configuration: configuration) { benchmark in
            await measure(benchmark, callers: callers) { _ = try await http.data(for: request) }
        }
    }
    Benchmark("HTTP/N=1/key-alone", configuration: configuration) { benchmark in
        benchmark.startMeasurement()
        let key = try? http.key(for: request)
        blackHole(key?.description)
        benchmark.stopMeasurement()
    }
    Benchmark("HTTP/N=1/task-coalescer-over-plain", configuration: configuration) { benchmark in
        await measure(benchmark, callers: 1) {
            _ = try await coalescer.value(key: 0) { try await plain.data(for: request).0 }
        }
    }
}

/// Measures `callers` concurrent calls of `send` (one is called directly, without a child task),
/// and records the requests the stub answered meanwhile. Any failure fails the benchmark.
private func measure(
    _ benchmark: Benchmark, callers: Int, _ send: @escaping @Sendable () async throws -> Void
) async {
    let before = InstantStub.requests.load(ordering: .relaxed)
    var failure: Error?
    benchmark.startMeasurement()
    do {
        if callers == 1 {
            try await send()
        } else {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<callers {
                    group.addTask { try await send() }
                }
                try await group.waitForAll()
            }
        }
    } catch {
        failure = error
    }
    benchmark.stopMeasurement()
    benchmark.measurement(requestsMetric, InstantStub.requests.load(ordering: .relaxed) - before)
    if let failure {
        benchmark.error("a request failed: \(failure)")
    }
}
