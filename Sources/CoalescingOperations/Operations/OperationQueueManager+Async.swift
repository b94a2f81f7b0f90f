import Foundation

extension OperationQueueManager {
    /// Enqueues `operation` as ``enqueue(operation:timeout:)`` does, and waits for the shared result.
    ///
    /// The operation usually has no caller of its own (``CoalescibleOperation/init(identifier:)``);
    /// if it has a completion handler, that handler is called too. The result reaches this caller
    /// on whatever thread finishes the work, without a queue hop, so it never depends on a queue
    /// such as `.main` being serviced.
    ///
    /// ```swift
    /// let user = try await manager.value(of: UserFetchOperation(service: service))
    /// ```
    ///
    /// Cancelling the awaiting task withdraws this caller only (see ``CoalescingHandle/cancel()``):
    /// the others still receive the result, and the work is cancelled when every caller has left.
    ///
    /// - Parameters:
    ///   - operation: A new operation.
    ///   - timeout: How long this caller waits at most; see ``enqueue(operation:timeout:)``.
    ///   - isolation: The caller's actor, inferred; the result is returned there.
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: The work's error; `CancellationError` if the awaiting task was cancelled;
    ///   ``CoalescingError/timedOut`` if `timeout` passed first; or
    ///   ``ConcurrentOperationError/cancelled`` if the work itself was cancelled (through
    ///   ``cancel(identifier:)``, ``cancelAll()`` or the operation's `cancel()`).
    public func value<Value: Sendable>(
        of operation: CoalescibleOperation<Value>,
        timeout: Duration? = nil,
        isolation: isolated (any Actor)? = #isolation
    ) async throws -> Value {
        try await awaitResult { handler in
            let joined = operation.state.withLock { $0.join(.handler(handler, queue: nil), priority: nil) }
            guard case .joined(let slot, _, _) = joined else {
                handOverIfCancelledBeforeEnqueue(operation)
                return nil
            }
            let handle = CoalescingHandle(enqueue(operation: operation).admission, operation: operation, slot: slot)
            if let timeout {
                handle.withdraw(after: timeout)
            }
            return handle
        }
    }

    /// Joins identical work in flight, or starts new work built by `makeOperation`, and waits for
    /// the shared result. The async form of
    /// ``enqueue(identifier:callBackQueue:priority:timeout:makeOperation:completionHandler:)``: no operation is
    /// created while work is in flight.
    ///
    /// ```swift
    /// let user = try await manager.value(identifier: "user", priority: OperationPriority(queuePriority: .high)) {
    ///     UserFetchOperation(service: service)
    /// }
    /// ```
    ///
    /// Cancelling the awaiting task withdraws this caller only.
    ///
    /// - Parameters:
    ///   - identifier: The identifier of the operations `makeOperation` builds.
    ///   - priority: How urgent this caller is; see
    ///     ``enqueue(identifier:callBackQueue:priority:timeout:makeOperation:completionHandler:)``.
    ///   - timeout: How long this caller waits at most; see ``enqueue(operation:timeout:)``.
    ///   - isolation: The caller's actor, inferred; the result is returned there.
    ///   - makeOperation: Builds the operation that runs the work; called at most once, and only
    ///     when no identical work is in flight.
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: The work's error; `CancellationError` if the awaiting task was cancelled;
    ///   ``CoalescingError/timedOut`` if `timeout` passed first; or
    ///   ``ConcurrentOperationError/cancelled`` if the work itself was cancelled.
    public func value<Value: Sendable>(
        identifier: String,
        priority: OperationPriority? = nil,
        timeout: Duration? = nil,
        isolation: isolated (any Actor)? = #isolation,
        makeOperation: () -> CoalescibleOperation<Value>
    ) async throws -> Value {
        try await awaitResult { handler in
            enqueue(
                identifier: identifier, callBackQueue: nil, priority: priority, timeout: timeout,
                makeOperation: makeOperation, completionHandler: handler)
        }
    }

    /// Registers a caller through `enqueueCaller` and waits for its result, withdrawing it if the
    /// task is cancelled. `enqueueCaller` returns nil if it could not register the caller.
    private func awaitResult<Value: Sendable>(
        isolation: isolated (any Actor)? = #isolation,
        _ enqueueCaller: (@escaping (Result<Value, Error>) -> Void) -> CoalescingHandle<Value>?
    ) async throws -> Value {
        try Task.checkCancellation()
        let relay = WithdrawalRelay<Value>()
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Value, Error>, Never>) in
                let handler: (Result<Value, Error>) -> Void = { continuation.resume(returning: $0) }
                guard let handle = enqueueCaller(handler) else {
                    return handler(.failure(ConcurrentOperationError.cancelled))
                }
                relay.register(handle)
            }
        } onCancel: {
            relay.cancel()
        }
        if case .failure(ConcurrentOperationError.cancelled) = result, Task.isCancelled {
            throw CancellationError()
        }
        return try result.get()
    }
}

/// Passes a task's cancellation to the caller it enqueued, whichever of the two happens first.
///
/// `withTaskCancellationHandler` may run its handler before, during or after the body registers
/// the caller; the relay remembers an early cancellation and applies it on registration.
private final class WithdrawalRelay<Value>: Sendable {
    private enum State {
        case waiting
        case registered(CoalescingHandle<Value>)
        case cancelled
    }

    private let state = LockedState(State.waiting)

    /// Records the caller's handle; withdraws it at once if the task was already cancelled.
    func register(_ handle: CoalescingHandle<Value>) {
        let cancelled = state.withLock { state in
            if case .cancelled = state { return true }
            state = .registered(handle)
            return false
        }
        if cancelled {
            handle.cancel()
        }
    }

    /// Withdraws the registered caller, or the one registered later.
    func cancel() {
        let handle: CoalescingHandle<Value>? = state.withLock { state in
            defer { state = .cancelled }
            if case .registered(let handle) = state { return handle }
            return nil
        }
        handle?.cancel()
    }
}
