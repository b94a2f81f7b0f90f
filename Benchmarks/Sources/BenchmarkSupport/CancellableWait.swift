import Synchronization

/// The least a cancellable wait can cost in Swift Concurrency: a task parks one continuation,
/// and cancelling the task resumes it with `CancellationError` from its cancellation handler.
///
/// It coalesces nothing; the task benchmarks use it as the floor under "a cancelled waiter
/// leaves", which the seed-001 actor cannot do at all (its waiters await `Task.value`).
public final class CancellableWait: Sendable {
    private enum Slot {
        case empty
        case waiting(CheckedContinuation<Void, Error>)
        case cancelled
    }

    private let slot = Mutex(Slot.empty)

    /// Creates a wait that nobody is in yet.
    public init() {}

    /// Suspends until the waiting task is cancelled, then throws `CancellationError`.
    public func wait() async throws {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<Void, Error>) in
                let cancelled = slot.withLock { slot in
                    if case .cancelled = slot { return true }
                    slot = .waiting(waiter)
                    return false
                }
                if cancelled {
                    waiter.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let waiter = slot.withLock { slot -> CheckedContinuation<Void, Error>? in
                defer { slot = .cancelled }
                if case .waiting(let waiter) = slot { return waiter }
                return nil
            }
            waiter?.resume(throwing: CancellationError())
        }
    }
}
