import CoalescingOperations
import Foundation
import XCTest

/// Records every callback per caller, and the queue each one ran on, so tests can assert that
/// each caller was called back exactly once, with what, and where.
final class ResultRecorder<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `calls` is guarded by `lock`; `all` is a semaphore.
    struct Call {
        let caller: String
        let result: Result<Value, Error>
        let queue: OperationQueue?
        let thread: Thread
    }

    private let lock = NSLock()
    private var calls: [Call] = []
    private let arrived = DispatchSemaphore(value: 0)

    /// A completion handler for `caller` that records its call.
    func handler(_ caller: String) -> (Result<Value, Error>) -> Void {
        { result in
            self.lock.withLock {
                self.calls.append(Call(caller: caller, result: result, queue: .current, thread: .current))
            }
            self.arrived.signal()
        }
    }

    /// Waits until `count` callbacks in total have arrived; false on timeout.
    func waitForCalls(_ count: Int, seconds: Double = 10) -> Bool {
        for _ in 0..<count where arrived.wait(timeout: .now() + seconds) == .timedOut {
            return false
        }
        return true
    }

    var all: [Call] { lock.withLock { calls } }

    func calls(of caller: String) -> [Call] {
        all.filter { $0.caller == caller }
    }

    /// The one result `caller` received; fails the test if it received none or several.
    func onlyResult(of caller: String, file: StaticString = #filePath, line: UInt = #line) -> Result<Value, Error>? {
        let calls = calls(of: caller)
        XCTAssertEqual(calls.count, 1, "\(caller) was called back \(calls.count) times", file: file, line: line)
        return calls.first?.result
    }

    /// Asserts that `caller` was called back once, with `value`.
    func assertValue(
        _ caller: String, _ value: Value, file: StaticString = #filePath, line: UInt = #line
    ) where Value: Equatable {
        guard let result = onlyResult(of: caller, file: file, line: line) else { return }
        XCTAssertEqual(try? result.get(), value, "\(caller) got \(result)", file: file, line: line)
    }

    /// Asserts that `caller` was called back once, with `ConcurrentOperationError.cancelled`.
    func assertCancelled(_ caller: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let result = onlyResult(of: caller, file: file, line: line) else { return }
        guard case .failure(let error) = result, error as? ConcurrentOperationError == .cancelled else {
            return XCTFail("\(caller) got \(result), expected .cancelled", file: file, line: line)
        }
    }
}
