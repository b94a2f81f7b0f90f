import Foundation

/// A gate async work can wait at until the test opens it. Waiting is cancellable.
public final class AsyncGate: @unchecked Sendable {
    // @unchecked: `isOpen`, `waiters` and `nextID` are guarded by `lock`.
    private let lock = NSLock()
    private var isOpen = false
    private var waiters: [Int: CheckedContinuation<Void, Error>] = [:]
    private var nextID = 0

    /// Creates an empty one.
    public init() {}

    /// Opens the gate for every waiter, present and future.
    public func open() {
        let waiting = lock.withLock {
            isOpen = true
            defer { waiters.removeAll() }
            return Array(waiters.values)
        }
        waiting.forEach { $0.resume() }
    }

    /// Returns once the gate is open; throws `CancellationError` if the task is cancelled first.
    public func wait() async throws {
        let id = lock.withLock {
            nextID += 1
            return nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                let openAlready = lock.withLock {
                    if isOpen || Task.isCancelled { return true }
                    waiters[id] = continuation
                    return false
                }
                if openAlready {
                    Task.isCancelled ? continuation.resume(throwing: CancellationError()) : continuation.resume()
                }
            }
        } onCancel: {
            lock.withLock { waiters.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
    }

    /// Waits, ignoring cancellation: for work that does not cooperate.
    public func waitIgnoringCancellation() async {
        await Task {
            try? await self.wait()
        }.value
    }
}

/// Task work held until `gate` opens: it counts its runs in `runs` and returns its run's number,
/// so that callers of different works get different values. The task coalescers' tests hold work
/// in flight with it, without sleeping.
public func gated(_ gate: AsyncGate, _ runs: Counter) -> @Sendable () async throws -> Int {
    {
        let run = runs.increment()
        try await gate.wait()
        return run
    }
}
