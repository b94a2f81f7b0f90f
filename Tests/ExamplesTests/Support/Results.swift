import Foundation

/// Collects the results of several callers, thread-safely, and lets a test wait for them.
final class Results<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `results` is guarded by `lock`.
    private let lock = NSLock()
    private var results: [Result<Value, Error>] = []
    private let arrived = DispatchSemaphore(value: 0)

    func append(_ result: Result<Value, Error>) {
        lock.withLock { results.append(result) }
        arrived.signal()
    }

    /// Waits for `count` more results; false on timeout.
    func wait(for count: Int, seconds: Double = 10) -> Bool {
        (0..<count).allSatisfy { _ in arrived.wait(timeout: .now() + seconds) == .success }
    }

    var all: [Result<Value, Error>] { lock.withLock { results } }

    var values: [Value] { all.compactMap { try? $0.get() } }

    var errors: [Error] {
        all.compactMap {
            if case .failure(let error) = $0 { error } else { nil }
        }
    }
}
