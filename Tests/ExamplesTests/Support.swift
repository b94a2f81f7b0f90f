import CoalescingOperations
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

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

/// A URLSession that caches nothing, so that every request reaches the server.
func makeSession() -> URLSession {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
    return URLSession(configuration: configuration)
}

/// A thread-safe counter.
final class Counter: @unchecked Sendable {
    // @unchecked: `value` is guarded by `lock`.
    private let lock = NSLock()
    private var value = 0

    var current: Int { lock.withLock { value } }

    func increment() {
        lock.withLock { value += 1 }
    }
}
