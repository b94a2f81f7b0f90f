import Benchmark
import BenchmarkSupport

/// Workload 5, joining a task coalescer: work for one key is in flight, and N = 10,000 waiters
/// (child tasks) join it.
///
/// Measures from spawning the first waiter until every waiter has joined: each arrives, hops onto
/// the coalescer's actor and registers (ours reserves a slot and parks a continuation; the seed-001
/// actor awaits the work's `Task.value`). "Every waiter has joined" is known by awaiting all
/// arrivals and then one no-op call onto the same actor, which runs after all of theirs. Creating
/// the child tasks is inside the measured region for every coalescer alike. Delivering the result
/// and checking that the work ran once and every waiter got 42 happen after it.
func registerTaskJoinBenchmarks() {
    let waiters = 10_000
    for kind in CoalescerKind.allCases {
        Benchmark(
            "TaskJoin/N=\(waiters)/\(kind.rawValue)",
            configuration: .init(maxDuration: .seconds(3), maxIterations: 60)
        ) { benchmark in
            let held = await HeldTaskWork(on: kind.make())
            let coalescer = held.coalescer
            let work = held.work
            let arrivals = Arrivals(expected: waiters)

            benchmark.startMeasurement()
            let served = await withTaskGroup(of: Int?.self) { group in
                for _ in 0..<waiters {
                    group.addTask {
                        arrivals.arrive()
                        return try? await coalescer.join(0, work)
                    }
                }
                await arrivals.waitForAll()
                await coalescer.probe()
                benchmark.stopMeasurement()

                await held.release()
                var served = 0
                for await value in group where value == 42 {
                    served += 1
                }
                return served
            }
            if served != waiters || held.runs.count != 1 {
                benchmark.error("\(served) of \(waiters) waiters served; the work ran \(held.runs.count) times")
            }
        }
    }
}
