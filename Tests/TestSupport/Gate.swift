import Foundation

/// A one-shot gate: `wait()` blocks until `open()` was called (or the timeout passes).
public final class Gate: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)

    /// Creates an empty one.
    public init() {}

    /// Opens the gate, releasing one waiter (each `open()` releases one `wait()`).
    public func open() {
        semaphore.signal()
    }

    /// Returns false if the gate stayed shut for `seconds`.
    public func wait(seconds: Double = 10) -> Bool {
        semaphore.wait(timeout: .now() + seconds) == .success
    }
}
