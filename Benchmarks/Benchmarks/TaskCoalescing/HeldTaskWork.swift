import BenchmarkSupport

/// Work held in flight on a coalescer: started by a first caller, finished by ``release()``.
struct HeldTaskWork {
    let coalescer: CoalescerUnderTest
    /// What every caller passes; counts its runs, so that a waiter that failed to join shows.
    let work: Work
    let runs = RunCounter()
    private let releaseGate = AsyncGate()
    private let firstCaller: Task<Int, Error>

    /// Starts the work through a first caller and returns once it is running.
    init(on coalescer: CoalescerUnderTest) async {
        let runs = runs
        let started = AsyncGate()
        let releaseGate = releaseGate
        let work: Work = {
            runs.increment()
            started.open()
            await releaseGate.wait()
            return 42
        }
        self.coalescer = coalescer
        self.work = work
        firstCaller = Task { try await coalescer.join(0, work) }
        await started.wait()
    }

    /// Lets the work finish with 42 and waits for its first caller to receive it.
    func release() async {
        releaseGate.open()
        _ = try? await firstCaller.value
    }
}
