import Foundation

/// Test equipment: a count that tasks can wait on until it reaches a threshold. A gate is a
/// threshold of 1 opened by `advance()`; arrivals at a coalescer are a threshold of N advanced by
/// its observer. Waiting is cancellable, so work held at a gate sees its cancellation.
public final class Threshold: @unchecked Sendable {
    // @unchecked: `count`, `waiters` and `nextID` are guarded by `lock`.
    private let lock = NSLock()
    private var count = 0
    private var waiters: [Int: (threshold: Int, continuation: CheckedContinuation<Void, any Error>)] = [:]
    private var nextID = 0

    /// Creates a count at zero.
    public init() {}

    /// Adds one, and releases the waiters whose threshold is reached.
    public func advance() {
        let released = lock.withLock {
            count += 1
            let reached = waiters.filter { $0.value.threshold <= count }
            reached.keys.forEach { waiters[$0] = nil }
            return reached.values.map(\.continuation)
        }
        released.forEach { $0.resume() }
    }

    /// Returns once the count is at least `threshold`.
    ///
    /// - Throws: `CancellationError` if the waiting task is cancelled first.
    public func wait(until threshold: Int = 1) async throws {
        let id = lock.withLock {
            nextID += 1
            return nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let ready = lock.withLock {
                    guard count < threshold, !Task.isCancelled else { return true }
                    waiters[id] = (threshold, continuation)
                    return false
                }
                if ready {
                    Task.isCancelled ? continuation.resume(throwing: CancellationError()) : continuation.resume()
                }
            }
        } onCancel: {
            lock.withLock { waiters.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
        }
    }
}
