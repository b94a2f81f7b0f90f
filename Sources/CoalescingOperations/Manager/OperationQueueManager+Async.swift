import Foundation

extension OperationQueueManager {
    /// Enqueues `operation` as ``enqueue(operation:)`` does, and waits for the shared result.
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
    ///   - isolation: The caller's actor, inferred; the result is returned there.
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: The work's error; `CancellationError` if the awaiting task was cancelled; or
    ///   ``ConcurrentOperationError/cancelled`` if the work itself was cancelled (through
    ///   ``cancel(identifier:)``, ``cancelAll()`` or the operation's `cancel()`).
    public func value<Value: Sendable>(
        of operation: CoalescibleOperation<Value>,
        isolation: isolated (any Actor)? = #isolation
    ) async throws -> Value {
        try await awaitResult {
            guard let slot = operation.subscribe(.handler($0, queue: nil)) else { return nil }
            return CoalescingHandle(enqueue(operation: operation).admission, operation: operation, slot: slot)
        }
    }

    /// Joins identical work in flight, or starts new work built by `makeOperation`, and waits for
    /// the shared result. The async form of
    /// ``enqueue(identifier:callBackQueue:makeOperation:completionHandler:)``: no operation is
    /// created while work is in flight.
    ///
    /// ```swift
    /// let questions = try await manager.value(identifier: url.absoluteString) {
    ///     QuestionsFetchOperation(url: url, session: session)
    /// }
    /// ```
    ///
    /// Cancelling the awaiting task withdraws this caller only.
    ///
    /// - Parameters:
    ///   - identifier: The identifier of the operations `makeOperation` builds.
    ///   - isolation: The caller's actor, inferred; the result is returned there.
    ///   - makeOperation: Builds the operation that runs the work; called at most once, and only
    ///     when no identical work is in flight.
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: The work's error; `CancellationError` if the awaiting task was cancelled; or
    ///   ``ConcurrentOperationError/cancelled`` if the work itself was cancelled.
    public func value<Value: Sendable>(
        identifier: String,
        isolation: isolated (any Actor)? = #isolation,
        makeOperation: () -> CoalescibleOperation<Value>
    ) async throws -> Value {
        try await awaitResult { handler in
            enqueue(
                identifier: identifier, callBackQueue: nil, makeOperation: makeOperation, completionHandler: handler)
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
