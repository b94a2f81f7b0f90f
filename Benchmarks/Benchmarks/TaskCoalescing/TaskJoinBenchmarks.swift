import Benchmark
import BenchmarkSupport

/// Workload 5, joining a task coalescer: work for one key is in flight, and N = 10,000 callers
/// (child tasks) join it.
///
/// Measures from spawning the first caller until every caller has joined: each arrives and
/// registers (ours take the coalescer's lock on their own thread, reserve a slot and park a
/// continuation under a cancellation handler; the seed-001 actor's hop onto the actor and await
/// the work's `Task.value`). Creating the child tasks is inside the measured region for every
/// coalescer alike. Delivering the result and checking that the work ran once and every caller got
/// 42 happen after it.
///
/// `ours-inflight-timeout` gives every caller a timeout (one that does not pass during the run),
/// and `ours-inflight-observer` has an observer that counts events: set against `ours-inflight`
/// from the same run, they show what a timeout and an observer cost a join.
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
                await coalescer.waitUntilJoined(waiters)
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
