import Benchmark
import BenchmarkSupport

/// Workload 5, a cancelled caller withdrawing: K = 1,000 callers have joined work in flight on an
/// `InFlightTaskCoalescer`; measures cancelling their tasks until each has thrown
/// `CancellationError`, while the work goes on for its first caller. (The benchmark keeps its
/// published name, `TaskCancelledWaiterLeaves`.)
///
/// The seed-001 actor has no figure here: its callers await the work's `Task.value`, which does
/// not react to the caller's cancellation, so a cancelled caller stays until the work ends. The
/// baseline is instead the floor of any cancellable wait (``CancellableWait``: one continuation
/// resumed from a cancellation handler), to show what withdrawing costs beyond it.
func registerCancelledWaiterBenchmarks() {
    let waiters = 1_000

    Benchmark(
        "TaskCancelledWaiterLeaves/K=\(waiters)/ours-inflight",
        configuration: .init(maxDuration: .seconds(3), maxIterations: 200)
    ) { benchmark in
        let held = await HeldTaskWork(on: CoalescerKind.oursInFlight.make())
        let coalescer = held.coalescer
        let work = held.work
        let arrivals = Arrivals(expected: waiters)
        let tasks = (0..<waiters).map { _ in
            Task {
                arrivals.arrive()
                return try await coalescer.join(0, work)
            }
        }
        await arrivals.waitForAll()
        await coalescer.waitUntilJoined(waiters)

        benchmark.startMeasurement()
        let left = await cancelAndCountLeavers(tasks)
        benchmark.stopMeasurement()

        await held.release()
        if left != waiters || held.runs.count != 1 {
            benchmark.error("\(left) of \(waiters) waiters left; the work ran \(held.runs.count) times")
        }
    }

    Benchmark(
        "TaskCancelledWaiterLeaves/K=\(waiters)/bare-cancellable-wait",
        configuration: .init(maxDuration: .seconds(3), maxIterations: 200)
    ) { benchmark in
        let arrivals = Arrivals(expected: waiters)
        let tasks = (0..<waiters).map { _ in
            Task {
                arrivals.arrive()
                try await CancellableWait().wait()
            }
        }
        await arrivals.waitForAll()

        benchmark.startMeasurement()
        let left = await cancelAndCountLeavers(tasks)
        benchmark.stopMeasurement()

        if left != waiters {
            benchmark.error("\(left) of \(waiters) waiters left")
        }
    }
}

/// Cancels every task, then counts those that ended by throwing `CancellationError`.
private func cancelAndCountLeavers<Success>(_ tasks: [Task<Success, Error>]) async -> Int {
    for task in tasks {
        task.cancel()
    }
    var left = 0
    for task in tasks {
        if case .failure(is CancellationError) = await task.result {
            left += 1
        }
    }
    return left
}
