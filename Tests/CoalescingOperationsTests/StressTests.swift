import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantees 2, 16-19, 21-22 and 24-27 (see the Guarantees article) under load: random interleavings of
/// enqueue, join, finish, withdrawal and cancellation from several threads lose no callback and
/// double none. The mix includes the manager's own queue as a callback queue, `cancelAll()` and the
/// queue's `cancelAllOperations()`, operations waiting on dependencies (cancelled or not, and
/// cancelled while they wait), and (run from `DeprecatedSpellingsTests`, with the deprecated
/// `coalesce(operation:)`) operations others joined by hand: each found a bug once (issue 9), and
/// the mix fails when any of them is put back. Operations waiting on a dependency also join
/// work in flight, are abandoned by their only caller's timeout, or are cancelled before they are
/// enqueued (and another operation waits on them), and nobody holds them once the library lets go:
/// their dependencies finish afterwards, which crashed the process once (issue 18). It also forgets
/// work, gives callers timeouts and priorities, lets some work run to completion when abandoned, and
/// then checks the statistics and the observer's events against what the callers saw, exactly.
/// Half the callers ask for progress, which the work reports right before it finishes: no caller
/// may hear progress after its result.
final class StressTests: XCTestCase {
    struct WorkFailed: Error {}

    /// Counts the callbacks each caller received, and what they carried.
    final class Tally: @unchecked Sendable {
        // @unchecked: `counts` and `wrongResults` are guarded by `lock`.
        private let lock = NSLock()
        private var counts: [Int]
        private var expected: Set<Int> = []
        private var isRegistering = true
        private var wrongResults: [String] = []
        /// Callers that withdrew themselves: the only ones that may hear `CancellationError`.
        private var withdrawing: Set<Int> = []
        private let everyoneCalled = DispatchSemaphore(value: 0)
        private var total = 0
        private var progressCalls = 0

        /// Progress calls heard, by every caller.
        var heardProgress: Int { lock.withLock { progressCalls } }

        /// - Parameter callers: How many caller numbers there may be; only those passed to
        ///   `expect(_:)` are owed a callback.
        init(callers: Int) {
            counts = Array(repeating: 0, count: callers)
        }

        /// Records that `caller` exists and is owed exactly one callback.
        func expect(_ caller: Int) {
            lock.withLock { _ = expected.insert(caller) }
        }

        /// Records that `caller` is about to withdraw itself (its handle, or its joined operation's
        /// `cancel()`).
        func withdraws(_ caller: Int) {
            lock.withLock { _ = withdrawing.insert(caller) }
        }

        /// Records a broken rule that is not about one callback.
        func fail(_ what: String) {
            lock.withLock { wrongResults.append(what) }
        }

        /// Says that every caller is registered, so that the last callback can be recognised.
        func stopRegistering() {
            let isDone = lock.withLock {
                isRegistering = false
                return total == expected.count
            }
            if isDone { everyoneCalled.signal() }
        }

        /// Records a progress call for `caller`, which must come before its one callback
        /// (Guarantee 24).
        func progress(caller: Int) {
            lock.withLock {
                progressCalls += 1
                if counts[caller] > 0 {
                    wrongResults.append("caller \(caller) heard progress after its result")
                }
            }
        }

        func record(caller: Int, identifier: Int, result: Result<Int, Error>) {
            let isLast = lock.withLock {
                // Guarantee 11: the work's own error, the work cancelled for everyone, this
                // caller's timeout, or `CancellationError` if it withdrew itself.
                switch result {
                case .success(let value) where value != identifier:
                    wrongResults.append("caller \(caller) of identifier \(identifier) got the result of \(value)")
                case .failure(let error)
                where !(error is WorkFailed) && !(error is CoalescingError)
                    && !(error is CancellationError && withdrawing.contains(caller)):
                    wrongResults.append("caller \(caller) got \(error)")
                default:
                    break
                }
                counts[caller] += 1
                total += 1
                return !isRegistering && total == expected.count
            }
            if isLast { everyoneCalled.signal() }
        }

        func waitForEveryone(seconds: Double) -> Bool {
            everyoneCalled.wait(timeout: .now() + seconds) == .success
        }

        var report: (lost: [Int], doubled: [Int], wrong: [String]) {
            lock.withLock {
                (
                    expected.sorted().filter { counts[$0] == 0 }, counts.indices.filter { counts[$0] > 1 },
                    wrongResults
                )
            }
        }
    }

    func testRandomInterleavingsLoseNoCallbackAndDoubleNone() {
        let environment = ProcessInfo.processInfo.environment
        Self.runMix(
            callers: environment["COALESCING_STRESS_OPERATIONS"].flatMap(Int.init) ?? 100_000, coalesceByHand: nil)
    }

    /// Joins `joining` to `host`'s work by hand; true if it joined.
    typealias HandCoalescing = @Sendable (_ host: TestOperation<Int>, _ joining: TestOperation<Int>) -> Bool

    /// Runs the mix with `callers` callers, seeded from `COALESCING_STRESS_SEED` or at random, and
    /// checks what every caller heard, the statistics and the events. With `coalesceByHand`, a
    /// few callers' operations first take another operation along by hand.
    static func runMix(callers: Int, coalesceByHand: HandCoalescing?) {
        let environment = ProcessInfo.processInfo.environment
        let seed = environment["COALESCING_STRESS_SEED"].flatMap(UInt64.init) ?? .random(in: 0...UInt64.max)
        print("StressTests seed \(seed), \(callers) callers; replay with COALESCING_STRESS_SEED=\(seed)")

        let events = EventCounts()
        let dependentEvents = EventCounts()
        let manager = OperationQueueManager(observer: events.count)
        // The manager's own queue is a callback queue too: `cancelAll()` and
        // `cancelAllOperations()` then meet results on their way to callers.
        let callbackQueues = (0..<4).map { Queues.concurrent("callbacks \($0)") } + [manager.queue]
        let dependencyQueue = Queues.concurrent("dependencies")
        // Operations with dependencies go through a manager of their own, whose queue is mostly
        // idle: on a busy queue, an operation that turns ready waits, and the race between its
        // start and its cancellation would hardly ever be run.
        let dependentManager = OperationQueueManager(observer: dependentEvents.count)
        // Forgets that dropped work in flight: each lets one more piece of work on the key overlap.
        let forgotten = LockedBox([String: Int]())
        // How each caller was admitted, and the handJoins that came in by hand.
        let admissions = LockedBox([CoalescingHandle<Int>.Admission: Int]())
        let handJoins = Counter()
        // Callers whose operation was cancelled before it was enqueued: answered `.ignored`.
        let cancelledBeforeEnqueue = Counter()
        // Operations waiting on one cancelled before it was enqueued: each must run.
        let dependentsOfCancelled = DispatchGroup()
        // Operations joined by hand are numbered after every regular caller.
        let tally = Tally(callers: 2 * callers)
        let pendingFinishes = DispatchGroup()
        let threads = 4
        let perThread = callers / threads
        XCTAssertEqual(perThread * threads, callers, "COALESCING_STRESS_OPERATIONS must be a multiple of \(threads)")

        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            var random = SplitMix64(seed: seed &+ UInt64(thread) &* 0x2545_F491_4F6C_DD1D)
            for index in 0..<perThread {
                let caller = thread * perThread + index
                let identifier = Int.random(in: 0..<32, using: &random)
                let finishing = Int.random(in: 0..<5, using: &random)
                let delay = Int.random(in: 0..<200, using: &random)
                let policy: AbandonedWorkPolicy = identifier % 4 == 0 ? .runToCompletion : .cancel
                let timeout: Duration? =
                    Int.random(in: 0..<10, using: &random) == 0
                    ? .microseconds(Int.random(in: 0..<400, using: &random)) : nil
                let priority = OperationPriority(
                    queuePriority: [.veryLow, .low, .normal, .high, .veryHigh][Int.random(in: 0..<5, using: &random)],
                    qualityOfService: [.background, .utility, .default, .userInitiated][
                        Int.random(in: 0..<4, using: &random)])
                // Set for an operation cancelled before its start (while a dependency held it back, or
                // before it was enqueued): its work must never run. (Not a set of identities: the
                // library lets go of such operations, and their addresses are reused.)
                let cancelledBeforeStart = LockedBox(false)
                // The work reports progress right before it finishes, on the finishing thread, so
                // that its last progress races the result to every caller (Guarantees 24 and 27).
                let reports = Int.random(in: 0..<4, using: &random)
                let asksProgress = Int.random(in: 0..<2, using: &random) == 0
                let work: @Sendable (TestOperation<Int>) -> Void = { operation in
                    if cancelledBeforeStart.value {
                        tally.fail("seed \(seed): work of an operation cancelled before it started ran")
                    }
                    let result: Result<Int, Error> = finishing == 4 ? .failure(WorkFailed()) : .success(identifier)
                    let finish = { @Sendable in
                        for step in 0..<reports {
                            operation.report(progress: WorkProgress(completed: Int64(step + 1), total: Int64(reports)))
                        }
                        operation.finish(result: result)
                    }
                    switch finishing {
                    case 0:
                        finish()
                    case 1:
                        pendingFinishes.enter()
                        DispatchQueue.global().async {
                            finish()
                            pendingFinishes.leave()
                        }
                    default:
                        pendingFinishes.enter()
                        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(delay)) {
                            finish()
                            pendingFinishes.leave()
                        }
                    }
                }
                let hearProgress: @Sendable (WorkProgress) -> Void = { _ in tally.progress(caller: caller) }
                let progress = asksProgress ? hearProgress : nil
                let handler: @Sendable (Result<Int, Error>) -> Void = {
                    tally.record(caller: caller, identifier: identifier, result: $0)
                }
                let callBackQueue = callbackQueues[caller % callbackQueues.count]

                tally.expect(caller)
                let operation: TestOperation<Int>?
                let handle: CoalescingHandle<Int>
                let shape = Int.random(in: 0..<100, using: &random)
                if shape < 4 {
                    // An operation waiting on a dependency, perhaps cancelled while it waits.
                    let dependency = BlockOperation {}
                    operation = TestOperation(
                        "\(identifier)", callBackQueue: callBackQueue, policy: policy, work: work,
                        completionHandler: handler)
                    operation!.addDependency(dependency)
                    handle = dependentManager.enqueue(operation: operation!, timeout: timeout)
                    if shape < 2 {
                        cancelledBeforeStart.mutate { $0 = true }
                        // Cancels the work it runs, or withdraws its caller if it joined other work.
                        tally.withdraws(caller)
                        operation!.cancel()
                    }
                    if shape == 1 || shape == 3 {
                        dependency.cancel()
                    }
                    dependencyQueue.addOperation(dependency)
                } else if shape < 8 {
                    // An operation waiting on a dependency that joins busy work (4), is abandoned when
                    // its only caller times out (5), or is cancelled before it is enqueued (6, 7).
                    let dependency = BlockOperation {}
                    if shape == 5 {
                        operation = nil
                        handle = dependentManager.enqueue(
                            identifier: "\(identifier)", callBackQueue: callBackQueue,
                            timeout: .microseconds(Int.random(in: 0..<400, using: &random)),
                            makeOperation: {
                                let made = TestOperation("\(identifier)", policy: policy, work: work)
                                made.addDependency(dependency)
                                return made
                            }, completionHandler: handler)
                    } else {
                        operation = TestOperation(
                            "\(identifier)", callBackQueue: callBackQueue, policy: policy, work: work,
                            completionHandler: handler)
                        operation!.addDependency(dependency)
                        if shape >= 6 {
                            cancelledBeforeStart.mutate { $0 = true }
                            cancelledBeforeEnqueue.increment()
                            operation!.cancel()
                            let waiting = BlockOperation { dependentsOfCancelled.leave() }
                            waiting.addDependency(operation!)
                            dependentsOfCancelled.enter()
                            dependencyQueue.addOperation(waiting)
                        }
                        handle = manager.enqueue(operation: operation!, timeout: timeout)
                    }
                    // Finishes after the library may have let go of the operation.
                    dependencyQueue.addOperation(dependency)
                } else if shape < 10, let coalesceByHand {
                    // Joined by hand before the manager sees it.
                    let joining = callers + caller
                    tally.expect(joining)
                    handJoins.increment()
                    operation = TestOperation(
                        "\(identifier)", callBackQueue: callBackQueue, policy: policy, work: work,
                        completionHandler: handler)
                    let riding = TestOperation<Int>(
                        "\(identifier)", callBackQueue: callBackQueue, policy: policy, work: work,
                        completionHandler: { tally.record(caller: joining, identifier: identifier, result: $0) })
                    if !coalesceByHand(operation!, riding) {
                        tally.fail("seed \(seed): a fresh operation refused to take another along by hand")
                    }
                    handle = manager.enqueue(operation: operation!, timeout: timeout)
                } else if shape < 53 {
                    operation = TestOperation(
                        "\(identifier)", callBackQueue: callBackQueue, policy: policy, work: work,
                        completionHandler: handler)
                    handle = manager.enqueue(operation: operation!, timeout: timeout, progress: progress)
                } else {
                    operation = nil
                    handle = manager.enqueue(
                        identifier: "\(identifier)", callBackQueue: callBackQueue, priority: priority, timeout: timeout,
                        makeOperation: { TestOperation("\(identifier)", policy: policy, work: work) },
                        progress: progress, completionHandler: handler)
                }
                admissions.mutate { $0[handle.admission, default: 0] += 1 }

                switch Int.random(in: 0..<10_000, using: &random) {
                case 0..<5: manager.cancelAll()
                case 5..<10: manager.queue.cancelAllOperations()
                case 10..<800:
                    tally.withdraws(caller)
                    handle.withdraw()
                case 800..<1200:
                    // Withdraws a joined operation's caller; cancels the work an operation runs.
                    tally.withdraws(caller)
                    (operation as Operation?)?.cancel() ?? handle.withdraw()
                case 1200..<1300: manager.cancel(identifier: "\(identifier)")
                case 1300..<1400:
                    if manager.forget(identifier: "\(identifier)") {
                        forgotten.mutate { $0["\(identifier)", default: 0] += 1 }
                    }
                case 1400..<1500: handle.setPriority(priority)
                case 1500..<2000:
                    tally.withdraws(caller)
                    pendingFinishes.enter()
                    DispatchQueue.global().async {
                        handle.withdraw()
                        pendingFinishes.leave()
                    }
                default: break
                }
            }
        }

        tally.stopRegistering()
        let everyoneCalled = tally.waitForEveryone(seconds: 300)
        // Before the unbounded waits below, which a dependent that never runs would hang.
        guard dependentsOfCancelled.wait(timeout: .now() + 300) == .success else {
            return XCTFail("seed \(seed): an operation waiting on one cancelled before it was enqueued never ran")
        }
        pendingFinishes.wait()
        dependencyQueue.waitUntilAllOperationsAreFinished()
        dependentManager.queue.waitUntilAllOperationsAreFinished()
        manager.queue.waitUntilAllOperationsAreFinished()
        callbackQueues.forEach { $0.waitUntilAllOperationsAreFinished() }

        let report = tally.report
        XCTAssertTrue(everyoneCalled, "seed \(seed): not every caller was called back")
        XCTAssertEqual(report.lost.count, 0, "seed \(seed): lost callbacks for callers \(report.lost.prefix(10))")
        XCTAssertEqual(
            report.doubled.count, 0, "seed \(seed): doubled callbacks for callers \(report.doubled.prefix(10))")
        XCTAssertEqual(report.wrong, [], "seed \(seed)")
        XCTAssertGreaterThan(tally.heardProgress, 0, "seed \(seed): the mix reports progress to callers who ask")

        // Guarantees 21 and 22: the counts match what the callers saw, and the events the counts.
        let statistics = [manager.statistics, dependentManager.statistics]
        func total(_ count: (CoalescingStatistics) -> Int) -> Int { statistics.map(count).reduce(0, +) }
        let admitted = admissions.value
        XCTAssertEqual(
            admitted[.ignored, default: 0], cancelledBeforeEnqueue.current,
            "seed \(seed): only operations cancelled before they were enqueued are ignored")
        XCTAssertEqual(total(\.workInFlight), 0, "seed \(seed): \(statistics)")
        // Work coalesced by hand is counted by no manager: each such host started work of its own,
        // and it and the operation joining it are two callers the managers never saw.
        let handCoalesced = handJoins.current
        XCTAssertEqual(
            total(\.workStarted), admitted[.startedWork, default: 0] - handCoalesced, "seed \(seed): \(statistics)")
        XCTAssertEqual(total(\.callersJoined), admitted[.joinedWork, default: 0], "seed \(seed): \(statistics)")
        let departed = total(\.callersServed) + total(\.callersWithdrawn) + total(\.callersTimedOut)
        XCTAssertEqual(departed, total(\.callersArrived), "seed \(seed): arrivals equal departures: \(statistics)")
        XCTAssertEqual(
            departed, callers + handJoins.current - 2 * handCoalesced - cancelledBeforeEnqueue.current,
            "seed \(seed): every caller admitted leaves once: \(statistics)")
        XCTAssertEqual(events.order.problems(forgotten: forgotten.value), [], "seed \(seed): events interleave")
        XCTAssertEqual(dependentEvents.order.problems(forgotten: [:]), [], "seed \(seed): events interleave")
        let counted = events.counts + dependentEvents.counts
        XCTAssertEqual(counted.started, total(\.workStarted), "seed \(seed)")
        XCTAssertEqual(counted.joined, total(\.callersJoined), "seed \(seed)")
        XCTAssertEqual(counted.withdrawn, total(\.callersWithdrawn), "seed \(seed)")
        XCTAssertEqual(counted.timedOut, total(\.callersTimedOut), "seed \(seed)")
        XCTAssertEqual(counted.ended, total(\.workEnded), "seed \(seed)")
        XCTAssertEqual(counted.served, total(\.callersServed), "seed \(seed)")
    }

    /// Counts the observer's events by kind.
    final class EventCounts: Sendable {
        struct Counts {
            var started = 0
            var joined = 0
            var withdrawn = 0
            var timedOut = 0
            var ended = 0
            var served = 0
            var order = EventOrder()

            static func + (lhs: Counts, rhs: Counts) -> Counts {
                var sum = lhs
                sum.started += rhs.started
                sum.joined += rhs.joined
                sum.withdrawn += rhs.withdrawn
                sum.timedOut += rhs.timedOut
                sum.ended += rhs.ended
                sum.served += rhs.served
                return sum
            }
        }

        private let box = LockedBox(Counts())

        var counts: Counts { box.value }
        var order: EventOrder { box.value.order }

        func count(_ event: CoalescingEvent<String>) {
            box.mutate { counts in
                counts.order.follow(event)
                switch event {
                case .workStarted: counts.started += 1
                case .callerJoined: counts.joined += 1
                case .callerWithdrawn(_, _, .withdrawn): counts.withdrawn += 1
                case .callerWithdrawn(_, _, .timedOut): counts.timedOut += 1
                case .workEnded(_, _, _, _, let served, _):
                    counts.ended += 1
                    counts.served += served
                case .priorityChanged, .workStalled: break
                }
            }
        }
    }
}
