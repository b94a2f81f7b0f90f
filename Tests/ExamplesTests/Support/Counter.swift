import Foundation

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
