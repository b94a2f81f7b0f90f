import NIOConcurrencyHelpers

/// A value that tasks can wait on until it meets a condition: the upstream's counts of its loads,
/// whether it still holds its answers, or what a test saw a coalescer do.
public final class Watched<State: Sendable>: Sendable {
    private struct Waiter: Sendable {
        let isMet: @Sendable (State) -> Bool
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct Storage: Sendable {
        var state: State
        var waiters: [Int: Waiter] = [:]
        var lastWaiter = 0
    }

    private let storage: NIOLockedValueBox<Storage>

    /// Creates the value.
    ///
    /// - Parameter state: The value to start from.
    public init(_ state: State) {
        storage = NIOLockedValueBox(Storage(state: state))
    }

    /// The value now.
    public var value: State {
        storage.withLockedValue { $0.state }
    }

    /// Changes the value, and wakes the waiters whose condition it now meets.
    ///
    /// - Parameter change: Changes the value, under the lock.
    /// - Returns: What `change` returns.
    @discardableResult
    public func update<Result>(_ change: (inout State) -> Result) -> Result {
        let (result, met) = storage.withLockedValue { storage in
            let result = change(&storage.state)
            let met = storage.waiters.filter { $0.value.isMet(storage.state) }
            storage.waiters = storage.waiters.filter { met[$0.key] == nil }
            return (result, met.values.map(\.continuation))
        }
        for continuation in met {
            continuation.resume()
        }
        return result
    }

    /// Returns once the value meets `condition`, at once if it already does.
    ///
    /// - Parameter condition: What the value must meet.
    /// - Throws: `CancellationError` if the waiting task is cancelled first.
    public func wait(until condition: @escaping @Sendable (State) -> Bool) async throws {
        let id = storage.withLockedValue { storage in
            storage.lastWaiter += 1
            return storage.lastWaiter
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let waits = storage.withLockedValue { storage in
                    guard !condition(storage.state), !Task.isCancelled else { return false }
                    storage.waiters[id] = Waiter(isMet: condition, continuation: continuation)
                    return true
                }
                guard !waits else { return }
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                } else {
                    continuation.resume()
                }
            }
        } onCancel: {
            let waiter = storage.withLockedValue { $0.waiters.removeValue(forKey: id) }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }
}
