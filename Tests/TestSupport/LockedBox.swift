import Foundation

/// A value shared between threads in a test, guarded by a lock.
public final class LockedBox<Value>: @unchecked Sendable {
    // @unchecked: `stored` is guarded by `lock`.
    private let lock = NSLock()
    private var stored: Value

    /// Creates a box holding `value`.
    public init(_ value: Value) {
        stored = value
    }

    /// The value; each read and each write takes the lock.
    public var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }

    /// Changes the value in place under the lock, and returns what `body` returns.
    public func mutate<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.withLock { body(&stored) }
    }
}
