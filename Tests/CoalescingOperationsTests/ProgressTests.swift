import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantees 24 to 27 (see the Guarantees article): progress reaches every caller that asked for
/// it, on its own queue, the latest first for a late joiner, never after its result or its
/// withdrawal, and bounded however fast the work reports.
final class ProgressTests: XCTestCase {
    /// Work held in flight: it opens `started`, then reports what `steps` hands it until it
    /// finishes with `value`.
    private final class Script: Sendable {
        let started = Gate()
        let steps = LockedBox<[WorkProgress?]>([])
        let next = DispatchSemaphore(value: 0)

        /// Queues a report (or, with nil, the finish) for the work to carry out.
        func then(_ step: WorkProgress?) {
            steps.mutate { $0.append(step) }
            next.signal()
        }

        func work(value: Int) -> @Sendable (TestOperation<Int>) -> Void {
            { operation in
                self.started.open()
                DispatchQueue.global().async {
                    while self.next.wait(timeout: .now() + 10) == .success {
                        guard let step = self.steps.mutate({ $0.removeFirst() }) else { break }
                        operation.report(progress: step)
                    }
                    operation.finish(result: .success(value))
                }
            }
        }
    }

    func testProgressReachesEveryCallerOnItsOwnQueueAndEndsBeforeItsResult() {
        // Guarantee 24.
        let manager = OperationQueueManager()
        let script = Script()
        let first = Queues.serial("first")
        let second = Queues.concurrent("second")
        let log = ProgressLog()
        let done = Gate()
        let operation = TestOperation<Int>(
            callBackQueue: first, work: script.work(value: 7),
            completionHandler: log.result("first", on: first, then: done))
        manager.enqueue(operation: operation, progress: log.progress("first", on: first))
        XCTAssertTrue(script.started.wait())
        manager.enqueue(
            identifier: "work", callBackQueue: second, makeOperation: { TestOperation<Int>(work: { _ in }) },
            progress: log.progress("second", on: second),
            completionHandler: log.result("second", on: second, then: done))

        script.then(WorkProgress(completed: 1, total: 3))
        script.then(WorkProgress(completed: 3, total: 3))
        script.then(nil)
        XCTAssertTrue(done.wait())
        XCTAssertTrue(done.wait())

        for caller in ["first", "second"] {
            let entries = log.entries(of: caller)
            XCTAssertEqual(entries.last, "result 7", "\(caller): the result is the last call")
            XCTAssertEqual(entries.dropLast().last, "progress 3 of 3", "\(caller): the final progress precedes it")
            XCTAssertTrue(entries.dropLast().allSatisfy { $0.hasPrefix("progress") }, "\(caller): \(entries)")
        }
        XCTAssertEqual(log.strays, [], "every call ran on its caller's own queue")
    }

    func testNoCallerOnAConcurrentQueueHearsProgressAfterItsResult() {
        // Guarantee 24, where a queue would run two hops at once: progress reported right before
        // the finish races the result to every caller, round after round.
        let callbacks = Queues.concurrent("callbacks")
        let late = LockedBox<[String]>([])
        for round in 0..<200 {
            let manager = OperationQueueManager()
            let heardResult = LockedBox<Set<Int>>([])
            let done = DispatchGroup()
            let work = TestOperation<Int> { operation in
                DispatchQueue.global().async {
                    for step in 1...3 {
                        operation.report(progress: WorkProgress(completed: Int64(step), total: 3))
                    }
                    operation.finish(result: .success(round))
                }
            }
            for caller in 0..<8 {
                done.enter()
                manager.enqueue(
                    identifier: "work", callBackQueue: callbacks, makeOperation: { work },
                    progress: { progress in
                        if heardResult.value.contains(caller) {
                            late.mutate { $0.append("round \(round), caller \(caller): \(progress) after the result") }
                        }
                    },
                    completionHandler: { _ in
                        heardResult.mutate { _ = $0.insert(caller) }
                        done.leave()
                    })
            }
            XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        }
        callbacks.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(late.value, [])
    }

    func testALateJoinerReceivesTheLatestProgressAtOnceThenWhatFollows() {
        // Guarantee 25.
        let manager = OperationQueueManager()
        let script = Script()
        let log = ProgressLog()
        let done = Gate()
        let sawFive = Gate()
        manager.enqueue(
            identifier: "work", makeOperation: { TestOperation<Int>(work: script.work(value: 1)) },
            progress: { if $0.completed == 5 { sawFive.open() } }, completionHandler: { _ in done.open() })
        XCTAssertTrue(script.started.wait())
        script.then(WorkProgress(completed: 2, total: 10))
        script.then(WorkProgress(completed: 5, total: 10))
        XCTAssertTrue(sawFive.wait(), "the first caller heard the work reach 5")

        manager.enqueue(
            identifier: "work", makeOperation: { TestOperation<Int>(work: { _ in }) },
            progress: log.progress("late", on: nil), completionHandler: log.result("late", on: nil, then: done))
        XCTAssertTrue(log.waitForEntries(1))
        XCTAssertEqual(log.entries(of: "late"), ["progress 5 of 10"], "the latest value, at once, and only it")

        script.then(WorkProgress(completed: 8, total: 10))
        script.then(nil)
        XCTAssertTrue(done.wait())
        XCTAssertTrue(done.wait())
        XCTAssertEqual(log.entries(of: "late"), ["progress 5 of 10", "progress 8 of 10", "result 1"])
    }

    func testAWithdrawnCallerReceivesNoProgressAfterItsCancellation() {
        // Guarantee 26.
        let manager = OperationQueueManager()
        let script = Script()
        let log = ProgressLog()
        let done = Gate()
        let stays = manager.enqueue(
            identifier: "work", makeOperation: { TestOperation<Int>(work: script.work(value: 4)) },
            progress: log.progress("stays", on: nil), completionHandler: log.result("stays", on: nil, then: done))
        XCTAssertEqual(stays.admission, .startedWork)
        XCTAssertTrue(script.started.wait())
        let leaves = manager.enqueue(
            identifier: "work", makeOperation: { TestOperation<Int>(work: { _ in }) },
            progress: log.progress("leaves", on: nil), completionHandler: log.result("leaves", on: nil, then: done))
        script.then(WorkProgress(completed: 1, total: 2))
        XCTAssertTrue(log.waitForEntries(2), "both callers heard the first report")

        leaves.withdraw()
        XCTAssertTrue(done.wait())
        script.then(WorkProgress(completed: 2, total: 2))
        script.then(nil)
        XCTAssertTrue(done.wait())

        XCTAssertEqual(log.entries(of: "leaves"), ["progress 1 of 2", "failure CancellationError"])
        XCTAssertEqual(log.entries(of: "stays"), ["progress 1 of 2", "progress 2 of 2", "result 4"])
    }

    func testAFloodOfUpdatesLeavesOneValueWaitingForASlowCaller() {
        // Guarantee 27: the latest wins, and one delivery at most is on its way.
        let manager = OperationQueueManager()
        let script = Script()
        let slow = Queues.serial("slow", suspended: true)
        let log = ProgressLog()
        let done = Gate()
        let updates = 100_000
        let flooding = TestOperation<Int> { operation in
            script.started.open()
            DispatchQueue.global().async {
                for completed in 1...updates {
                    operation.report(progress: WorkProgress(completed: Int64(completed), total: Int64(updates)))
                }
                script.then(nil)
            }
        }
        manager.enqueue(
            identifier: "work", callBackQueue: slow, makeOperation: { flooding },
            progress: log.progress("slow", on: slow), completionHandler: log.result("slow", on: slow, then: done))
        XCTAssertTrue(script.started.wait())
        XCTAssertEqual(script.next.wait(timeout: .now() + 10), .success, "every update was reported")
        XCTAssertEqual(slow.operationCount, 1, "one delivery waits on the caller's queue, not one per update")
        flooding.finish(result: .success(9))

        slow.isSuspended = false
        XCTAssertTrue(done.wait())
        XCTAssertEqual(log.entries(of: "slow"), ["progress \(updates) of \(updates)", "result 9"])
    }

    func testTaskCallersReceiveTheWorksProgressBeforeTheirValue() async throws {
        // Guarantees 24 and 25, on the task half.
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let release = AsyncGate()
        let reported = AsyncGate()
        let seen = LockedBox<[String: [Int64]]>([:])
        func caller(_ name: String) -> @Sendable (WorkProgress) -> Void {
            { progress in seen.mutate { $0[name, default: []].append(progress.completed) } }
        }
        let work: @Sendable () async throws -> Int = {
            ProgressReporter.current.report(progress: WorkProgress(completed: 1, total: 2))
            reported.open()
            await release.waitIgnoringCancellation()
            ProgressReporter.current.report(progress: WorkProgress(completed: 2, total: 2))
            return 6
        }
        async let first = coalescer.value(key: "k", progress: caller("first"), operation: work)
        await reported.waitIgnoringCancellation()
        async let second = coalescer.value(key: "k", progress: caller("second"), operation: work)
        await waitUntil("the late joiner heard the latest progress") { seen.value["second"] == [1] }
        release.open()

        let values = try await [first, second]
        XCTAssertEqual(values, [6, 6])
        XCTAssertEqual(seen.value["first"]?.last, 2, "the final progress reached the caller before its value")
        XCTAssertEqual(seen.value["second"], [1, 2], "the late joiner heard the latest value first")
    }
}

/// What each caller heard, in order, and any call that ran off its caller's queue.
private final class ProgressLog: Sendable {
    private let calls = LockedBox<[(caller: String, entry: String)]>([])
    private let straysBox = LockedBox<[String]>([])
    private let arrived = DispatchSemaphore(value: 0)

    var strays: [String] { straysBox.value }

    func entries(of caller: String) -> [String] {
        calls.value.filter { $0.caller == caller }.map(\.entry)
    }

    func waitForEntries(_ count: Int) -> Bool {
        (0..<count).allSatisfy { _ in arrived.wait(timeout: .now() + 10) == .success }
    }

    private func record(_ caller: String, _ entry: String, on queue: OperationQueue?) {
        if let queue, OperationQueue.current !== queue {
            straysBox.mutate { $0.append("\(caller): \(entry)") }
        }
        calls.mutate { $0.append((caller, entry)) }
        arrived.signal()
    }

    func progress(_ caller: String, on queue: OperationQueue?) -> @Sendable (WorkProgress) -> Void {
        { self.record(caller, "progress \($0)", on: queue) }
    }

    func result(_ caller: String, on queue: OperationQueue?, then done: Gate) -> @Sendable (Result<Int, Error>) -> Void
    {
        { result in
            switch result {
            case .success(let value): self.record(caller, "result \(value)", on: queue)
            case .failure(let error): self.record(caller, "failure \(type(of: error))", on: queue)
            }
            done.open()
        }
    }
}
