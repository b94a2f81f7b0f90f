import CoalescingOperations
import Foundation
import XCTest

/// SPEC point 2 under load: random interleavings of enqueue, join, finish, withdrawal and
/// cancellation from several threads lose no callback and double none.
final class StressTests: XCTestCase {
    struct WorkFailed: Error {}

    /// Counts the callbacks each caller received, and what they carried.
    final class Tally: @unchecked Sendable {
        // @unchecked: `counts` and `wrongResults` are guarded by `lock`.
        private let lock = NSLock()
        private var counts: [Int]
        private var wrongResults: [String] = []
        private let everyoneCalled = DispatchSemaphore(value: 0)
        private var total = 0

        init(callers: Int) {
            counts = Array(repeating: 0, count: callers)
        }

        func record(caller: Int, identifier: Int, result: Result<Int, Error>) {
            var wrong: String?
            switch result {
            case .success(let value) where value != identifier:
                wrong = "caller \(caller) of identifier \(identifier) got the result of \(value)"
            case .failure(let error) where !(error is WorkFailed) && error as? ConcurrentOperationError != .cancelled:
                wrong = "caller \(caller) got \(error)"
            default:
                break
            }
            let isLast = lock.withLock {
                counts[caller] += 1
                total += 1
                if let wrong { wrongResults.append(wrong) }
                return total == counts.count
            }
            if isLast { everyoneCalled.signal() }
        }

        func waitForEveryone(seconds: Double) -> Bool {
            everyoneCalled.wait(timeout: .now() + seconds) == .success
        }

        var report: (lost: [Int], doubled: [Int], wrong: [String]) {
            lock.withLock {
                (
                    counts.indices.filter { counts[$0] == 0 }, counts.indices.filter { counts[$0] > 1 },
                    wrongResults
                )
            }
        }
    }

    func testRandomInterleavingsLoseNoCallbackAndDoubleNone() {
        let environment = ProcessInfo.processInfo.environment
        let seed = environment["COALESCING_STRESS_SEED"].flatMap(UInt64.init) ?? .random(in: 0...UInt64.max)
        let callers = environment["COALESCING_STRESS_OPERATIONS"].flatMap(Int.init) ?? 100_000
        print("StressTests seed \(seed), \(callers) callers; replay with COALESCING_STRESS_SEED=\(seed)")

        let manager = OperationQueueManager()
        let callbackQueues = (0..<4).map { Queues.concurrent("callbacks \($0)") }
        let tally = Tally(callers: callers)
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
                let work: @Sendable (TestOperation<Int>) -> Void = { operation in
                    let result: Result<Int, Error> = finishing == 4 ? .failure(WorkFailed()) : .success(identifier)
                    switch finishing {
                    case 0:
                        operation.finish(result: result)
                    case 1:
                        pendingFinishes.enter()
                        DispatchQueue.global().async {
                            operation.finish(result: result)
                            pendingFinishes.leave()
                        }
                    default:
                        pendingFinishes.enter()
                        DispatchQueue.global().asyncAfter(deadline: .now() + .microseconds(delay)) {
                            operation.finish(result: result)
                            pendingFinishes.leave()
                        }
                    }
                }
                let handler: (Result<Int, Error>) -> Void = {
                    tally.record(caller: caller, identifier: identifier, result: $0)
                }
                let callBackQueue = callbackQueues[caller % callbackQueues.count]

                let operation: TestOperation<Int>?
                let handle: CoalescingHandle<Int>
                if Bool.random(using: &random) {
                    operation = TestOperation(
                        "\(identifier)", callBackQueue: callBackQueue, work: work, completionHandler: handler)
                    handle = manager.enqueue(operation: operation!)
                } else {
                    operation = nil
                    handle = manager.enqueue(
                        identifier: "\(identifier)", callBackQueue: callBackQueue,
                        makeOperation: { TestOperation("\(identifier)", work: work) }, completionHandler: handler)
                }

                switch Int.random(in: 0..<100, using: &random) {
                case 0..<8: handle.cancel()
                case 8..<12: (operation as Operation?)?.cancel() ?? handle.cancel()
                case 12: manager.cancel(identifier: "\(identifier)")
                case 13..<18:
                    pendingFinishes.enter()
                    DispatchQueue.global().async {
                        handle.cancel()
                        pendingFinishes.leave()
                    }
                default: break
                }
            }
        }

        let everyoneCalled = tally.waitForEveryone(seconds: 300)
        pendingFinishes.wait()
        manager.queue.waitUntilAllOperationsAreFinished()
        callbackQueues.forEach { $0.waitUntilAllOperationsAreFinished() }

        let report = tally.report
        XCTAssertTrue(everyoneCalled, "seed \(seed): not every caller was called back")
        XCTAssertEqual(report.lost.count, 0, "seed \(seed): lost callbacks for callers \(report.lost.prefix(10))")
        XCTAssertEqual(
            report.doubled.count, 0, "seed \(seed): doubled callbacks for callers \(report.doubled.prefix(10))")
        XCTAssertEqual(report.wrong, [], "seed \(seed)")
    }
}
