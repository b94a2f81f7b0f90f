import Foundation

/// A thread-safe counter.
public final class Counter: @unchecked Sendable {
    // @unchecked: `value` is guarded by `lock`.
    private let lock = NSLock()

    /// Creates an empty one.
    public init() {}
    private var value = 0

    /// The count now.
    public var current: Int { lock.withLock { value } }

    /// Adds one, and returns the new count.
    @discardableResult
    public func increment() -> Int {
        lock.withLock {
            value += 1
            return value
        }
    }
}
