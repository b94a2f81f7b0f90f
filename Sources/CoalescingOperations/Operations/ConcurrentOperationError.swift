/// The error an operation finishes with when it is cancelled, or when its caller withdraws.
///
/// Compare with `==`: `if case .failure(let error) = result, error as? ConcurrentOperationError == .cancelled`.
public enum ConcurrentOperationError: Error, Equatable, Sendable {
    /// The work was cancelled, or this caller withdrew before the work finished.
    case cancelled
}

/// The name users of the blog pattern know for ``ConcurrentOperationError``.
public typealias CoalescibleOperationError = ConcurrentOperationError
