import Foundation

/// A one-shot gate: `wait()` blocks until `open()` was called (or the timeout passes).
final class Gate: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)

    func open() {
        semaphore.signal()
    }

    /// Returns false if the gate stayed shut for `seconds`.
    func wait(seconds: Double = 10) -> Bool {
        semaphore.wait(timeout: .now() + seconds) == .success
    }
}
