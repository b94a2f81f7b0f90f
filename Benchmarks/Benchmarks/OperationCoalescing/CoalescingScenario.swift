import BenchmarkSupport
import CoalescingOperations
import Foundation

/// One iteration's world: a suspended work queue holding `pending` unrelated operations and one
/// piece of shared work (identifier "shared"), which callers then join through one ``CallerPath``.
///
/// Everything is built in `init` (or ``makeDistinctWork()``), outside the measured region. The
/// measured methods are ``join(_:)``, ``enqueueDistinctWork()``, ``addDistinctWorkToQueue()`` and
/// ``finishSharedWork()``; ``runToCompletion()`` and ``drain()`` tear down after it, waiting (never
/// sleeping) until every callback ran and every queue is empty, so that nothing spills into the
/// next measurement.
final class CoalescingScenario {
    let path: CallerPath
    let workQueue = Queues.work(suspended: true)
    let callbackQueues: [OperationQueue]
    private let manager: OperationQueueManager
    private let naiveManager: NaiveOperationQueueManager

    /// Counts the shared work's callers down: the first one plus every joiner.
    private let countdown: Countdown
    private let handler: @Sendable (Result<Int, Error>) -> Void
    private let ignore: @Sendable (Result<Int, Error>) -> Void = { _ in }

    /// Set when the shared work is held: its queue started it and it waits for `finish(result:)`.
    private let started = DispatchSemaphore(value: 0)
    private var heldWork: HeldWork?
    private var naiveHeldWork: NaiveHeldWork?

    /// Work with an identifier of its own, built before the measured region.
    private var distinctWork: InstantWork?
    private var naiveDistinctWork: NaiveInstantWork?

    /// - Parameters:
    ///   - path: How callers reach the shared work.
    ///   - joiners: How many callers will join (the shared work's first caller is extra).
    ///   - pending: Unrelated operations enqueued before the shared work.
    ///   - callbackQueueCount: Callers are spread round-robin over this many serial queues.
    ///   - held: Whether the shared work stays executing until ``finishSharedWork()``, rather than
    ///     finishing as soon as it starts.
    init(path: CallerPath, joiners: Int, pending: Int = 0, callbackQueueCount: Int = 1, held: Bool = false) {
        self.path = path
        callbackQueues = (0..<callbackQueueCount).map(Queues.callbacks)
        manager = OperationQueueManager(queue: workQueue)
        naiveManager = NaiveOperationQueueManager(queue: workQueue)
        countdown = Countdown(joiners + 1)
        handler = countdown.handler()

        let firstQueue = callbackQueues[0]
        if path == .naive {
            // Straight onto the queue: the naive manager would add them all the same, after a scan
            // each (quadratic set-up); its only state is the queue's list of operations.
            workQueue.addOperations(
                (0..<pending).map {
                    NaiveInstantWork(identifier: "pending-\($0)", callBackQueue: firstQueue, completionHandler: ignore)
                },
                waitUntilFinished: false)
        } else {
            for index in 0..<pending {
                manager.enqueue(
                    operation: InstantWork(
                        identifier: "pending-\(index)", callBackQueue: firstQueue, completionHandler: ignore))
            }
        }

        switch (path, held) {
        case (.oursOperation, false):
            manager.enqueue(
                operation: InstantWork(identifier: "shared", callBackQueue: firstQueue, completionHandler: handler))
        case (.oursOperation, true):
            let work = HeldWork(
                identifier: "shared", started: started, callBackQueue: firstQueue, completionHandler: handler)
            heldWork = work
            manager.enqueue(operation: work)
        case (.oursHandler, _):
            manager.enqueue(
                identifier: "shared", callBackQueue: firstQueue,
                makeOperation: { () -> CoalescibleOperation<Int> in
                    guard held else { return InstantWork(identifier: "shared") }
                    let work = HeldWork(identifier: "shared", started: started)
                    heldWork = work
                    return work
                },
                completionHandler: handler)
        case (.naive, false):
            naiveManager.enqueue(
                operation: NaiveInstantWork(identifier: "shared", callBackQueue: firstQueue, completionHandler: handler)
            )
        case (.naive, true):
            let work = NaiveHeldWork(
                identifier: "shared", started: started, callBackQueue: firstQueue, completionHandler: handler)
            naiveHeldWork = work
            naiveManager.enqueue(operation: work)
        }
    }

    // MARK: Measured

    /// `count` callers join the shared work, each as a user would call the API: the operation
    /// paths build one operation per caller. Every caller hands over the same ready-made handler;
    /// passing it to the library's generic parameter still costs one small allocation per call (a
    /// re-abstraction thunk), as a capturing closure literal would cost its context, so each path
    /// pays what a real caller pays.
    func join(_ count: Int) {
        let queues = callbackQueues
        let handler = handler
        switch path {
        case .oursOperation:
            for index in 0..<count {
                let queue = queues[index % queues.count]
                manager.enqueue(
                    operation: InstantWork(identifier: "shared", callBackQueue: queue, completionHandler: handler))
            }
        case .oursHandler:
            for index in 0..<count {
                let queue = queues[index % queues.count]
                manager.enqueue(
                    identifier: "shared", callBackQueue: queue,
                    makeOperation: { () -> CoalescibleOperation<Int> in InstantWork(identifier: "shared") },
                    completionHandler: handler)
            }
        case .naive:
            for index in 0..<count {
                let queue = queues[index % queues.count]
                naiveManager.enqueue(
                    operation: NaiveInstantWork(identifier: "shared", callBackQueue: queue, completionHandler: handler))
            }
        }
    }

    /// Builds work with an identifier nothing else has, for ``enqueueDistinctWork()``; not measured.
    func makeDistinctWork() {
        let queue = callbackQueues[0]
        switch path {
        case .oursOperation, .oursHandler:
            distinctWork = InstantWork(identifier: "distinct", callBackQueue: queue, completionHandler: ignore)
        case .naive:
            naiveDistinctWork = NaiveInstantWork(
                identifier: "distinct", callBackQueue: queue, completionHandler: ignore)
        }
    }

    /// One caller enqueues the work ``makeDistinctWork()`` built: new work, nothing to coalesce with.
    func enqueueDistinctWork() {
        if let distinctWork {
            manager.enqueue(operation: distinctWork)
        }
        if let naiveDistinctWork {
            naiveManager.enqueue(operation: naiveDistinctWork)
        }
    }

    /// Adds the work ``makeDistinctWork()`` built straight to the work queue, bypassing the manager:
    /// what Foundation alone costs with the same P operations pending.
    func addDistinctWorkToQueue() {
        if let distinctWork {
            workQueue.addOperation(distinctWork)
        }
    }

    /// Finishes the held shared work from this thread and waits until every caller was called back.
    func finishSharedWork() {
        heldWork?.finish(result: .success(42))
        naiveHeldWork?.finish(result: .success(42))
        countdown.wait()
    }

    // MARK: Set-up and tear-down

    /// Resumes the work queue and, for held work, waits until its queue has started it.
    func startHeldWork() {
        workQueue.isSuspended = false
        started.wait()
    }

    /// Resumes the work queue, waits for every caller of the shared work, then drains all queues.
    func runToCompletion() {
        workQueue.isSuspended = false
        countdown.wait()
        drain()
    }

    /// Waits until the work queue and every callback queue are empty.
    func drain() {
        Queues.drain([workQueue] + callbackQueues)
    }
}
