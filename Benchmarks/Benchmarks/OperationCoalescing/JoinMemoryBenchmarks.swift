import Benchmark
import BenchmarkSupport
import CoalescingOperations
import Foundation

/// Workload 6, memory per joined caller: N = 1,000,000 callers join one piece of work held pending
/// on a suspended queue through `enqueue(identifier:callBackQueue:makeOperation:completionHandler:)`,
/// all with the same ready-made closure that captures nothing, all on one callback queue.
///
/// Measures the bytes still allocated at the end of the measured region (the harness's
/// `memoryLeakedBytes`: bytes requested from malloc minus bytes freed, counted by its malloc
/// interposer), which is everything the million joins keep while the work is in flight: the
/// callers list after its last growth, and whatever each caller costs. Divide by N for the bytes
/// per caller. Only the benchmark's thread runs during the region (the queues are suspended or
/// idle), so the process-wide count is this thread's.
///
/// The caller's closure is not the library's: a concrete closure handed to a generic API is
/// wrapped in a re-abstraction thunk, one small allocation per call, whatever the library does with
/// it. `closure-alone` measures that wrapper by itself: the same closure stored N times into
/// generic storage sized before the measured region. `ours-handler` minus `closure-alone` is the
/// library's share per caller, which issue 11 caps at 64 bytes (`Scripts/ratios.py` prints it).
///
/// Bytes are requested sizes; glibc adds its own rounding and chunk header on top (a 32-byte
/// request occupies a 48-byte chunk), for the closure and the list alike.
func registerJoinMemoryBenchmarks() {
    let callers = 1_000_000
    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .mallocCountTotal, .memoryLeakedBytes],
        warmupIterations: 1,
        maxDuration: .seconds(10),
        maxIterations: 5
    )
    Benchmark("JoinMemory/N=\(callers)/ours-handler", configuration: configuration) { benchmark in
        let scenario = JoinMemoryScenario()
        benchmark.startMeasurement()
        scenario.join(callers)
        benchmark.stopMeasurement()
        scenario.runToCompletion()
    }
    Benchmark("JoinMemory/N=\(callers)/closure-alone", configuration: configuration) { benchmark in
        let scenario = JoinMemoryScenario()
        let storage = StoredHandlers<Int>(capacity: callers)
        benchmark.startMeasurement()
        scenario.store(callers, into: storage)
        benchmark.stopMeasurement()
        storage.release()
        scenario.runToCompletion()
    }
}

/// One piece of work held pending on a suspended queue, with its first caller, for a million more
/// callers to join.
final class JoinMemoryScenario {
    private let workQueue = Queues.work(suspended: true)
    private let callbackQueue = Queues.callbacks()
    private let manager: OperationQueueManager
    /// The work's first caller: delivery ends when it has ticked and the callback queue is drained.
    private let countdown = Countdown(1)
    /// Every joining caller's closure: one, built here, capturing nothing.
    private let handler: @Sendable (Result<Int, Error>) -> Void = { _ in }

    init() {
        manager = OperationQueueManager(queue: workQueue)
        manager.enqueue(
            identifier: "shared", callBackQueue: callbackQueue,
            makeOperation: { () -> CoalescibleOperation<Int> in InstantWork(identifier: "shared") },
            completionHandler: countdown.handler())
    }

    /// `count` callers join the pending work with the shared closure.
    func join(_ count: Int) {
        let handler = handler
        for _ in 0..<count {
            manager.enqueue(
                identifier: "shared", callBackQueue: callbackQueue,
                makeOperation: { () -> CoalescibleOperation<Int> in InstantWork(identifier: "shared") },
                completionHandler: handler)
        }
    }

    /// Stores the shared closure `count` times into `storage`, as the library stores a caller's
    /// handler: in a generic payload, which costs the closure its re-abstraction thunk.
    func store(_ count: Int, into storage: StoredHandlers<Int>) {
        let handler = handler
        for index in 0..<count {
            storage.set(index, handler)
        }
    }

    /// Lets the work run, waits for its first caller, then drains both queues (every caller called).
    func runToCompletion() {
        workQueue.isSuspended = false
        countdown.wait()
        Queues.drain([workQueue, callbackQueue])
    }
}

/// Room for `capacity` completion handlers, allocated up front so that storing one allocates only
/// what the handler itself needs.
final class StoredHandlers<Value> {
    /// A handler kept the way `Subscriber<Value>` keeps it: as the payload of a generic enum.
    enum Stored {
        case handler((Result<Value, Error>) -> Void)
    }

    private let slots: UnsafeMutablePointer<Stored?>
    private let capacity: Int

    init(capacity: Int) {
        self.capacity = capacity
        slots = .allocate(capacity: capacity)
        slots.initialize(repeating: nil, count: capacity)
    }

    /// Stores `handler` in slot `index`.
    func set(_ index: Int, _ handler: @escaping (Result<Value, Error>) -> Void) {
        slots[index] = .handler(handler)
    }

    /// Frees every stored handler and the slots.
    func release() {
        slots.deinitialize(count: capacity)
        slots.deallocate()
    }
}
