import CoalescingOperations
import Foundation
import XCTest

/// Records every callback per caller, and the queue each one ran on, so tests can assert that
/// each caller was called back exactly once, with what, and where.
public final class ResultRecorder<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `calls` is guarded by `lock`; `all` is a semaphore.
    /// One callback: who was called, with what, on which queue and thread.
    public struct Call {
        /// The caller's name.
        public let caller: String
        /// What it received.
        public let result: Result<Value, Error>
        /// The operation queue it ran on, if any.
        public let queue: OperationQueue?
        /// The thread it ran on.
        public let thread: Thread
    }

    private let lock = NSLock()

    /// Creates an empty one.
    public init() {}
    private var calls: [Call] = []
    private let arrived = DispatchSemaphore(value: 0)

    /// A completion handler for `caller` that records its call.
    public func handler(_ caller: String) -> @Sendable (Result<Value, Error>) -> Void {
        { result in
            self.lock.withLock {
                self.calls.append(Call(caller: caller, result: result, queue: .current, thread: .current))
            }
            self.arrived.signal()
        }
    }

    /// Waits until `count` callbacks in total have arrived; false on timeout.
    public func waitForCalls(_ count: Int, seconds: Double = 10) -> Bool {
        for _ in 0..<count where arrived.wait(timeout: .now() + seconds) == .timedOut {
            return false
        }
        return true
    }

    /// Every callback so far, in order.
    public var all: [Call] { lock.withLock { calls } }

    /// Records `result` for an unnamed caller, for tests that only count and compare results.
    public func append(_ result: Result<Value, Error>) {
        handler("")(result)
    }

    /// Every result recorded, in the order they arrived.
    public var results: [Result<Value, Error>] { all.map(\.result) }

    /// The values among the results.
    public var values: [Value] { results.compactMap { try? $0.get() } }

    /// The errors among the results.
    public var errors: [Error] {
        results.compactMap {
            if case .failure(let error) = $0 { error } else { nil }
        }
    }

    /// The callbacks `caller` received.
    public func calls(of caller: String) -> [Call] {
        all.filter { $0.caller == caller }
    }

    /// The one result `caller` received; fails the test if it received none or several.
    public func onlyResult(of caller: String, file: StaticString = #filePath, line: UInt = #line) -> Result<
        Value, Error
    >? {
        let calls = calls(of: caller)
        XCTAssertEqual(calls.count, 1, "\(caller) was called back \(calls.count) times", file: file, line: line)
        return calls.first?.result
    }

    /// Asserts that `caller` was called back once, with `value`.
    public func assertValue(
        _ caller: String, _ value: Value, file: StaticString = #filePath, line: UInt = #line
    ) where Value: Equatable {
        guard let result = onlyResult(of: caller, file: file, line: line) else { return }
        XCTAssertEqual(try? result.get(), value, "\(caller) got \(result)", file: file, line: line)
    }

    /// Asserts that `caller` was called back once, with `CoalescingError.cancelled`: the work was
    /// cancelled for every caller (Guarantee 6).
    public func assertCancelled(_ caller: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let result = onlyResult(of: caller, file: file, line: line) else { return }
        guard case .failure(let error) = result, error as? CoalescingError == .cancelled else {
            return XCTFail("\(caller) got \(result), expected CoalescingError.cancelled", file: file, line: line)
        }
    }

    /// Asserts that `caller` was called back once, with `CancellationError`: it withdrew itself
    /// while the work went on (Guarantee 5).
    public func assertWithdrawn(_ caller: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let result = onlyResult(of: caller, file: file, line: line) else { return }
        guard case .failure(let error) = result, error is CancellationError else {
            return XCTFail("\(caller) got \(result), expected CancellationError", file: file, line: line)
        }
    }

    /// Asserts that `caller` was called back once, with `CoalescingError.timedOut`.
    public func assertTimedOut(_ caller: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let result = onlyResult(of: caller, file: file, line: line) else { return }
        guard case .failure(let error) = result, error as? CoalescingError == .timedOut else {
            return XCTFail("\(caller) got \(result), expected .timedOut", file: file, line: line)
        }
    }
}
