import CoalescingOperations
import Foundation

/// The app's entry point for the signed-in user. Callers ask for the user; whether their request
/// joins one in flight is the manager's business.
public final class UserDataManager: Sendable {
    private let queueManager: OperationQueueManager
    private let service: UserService

    /// Creates a data manager.
    ///
    /// - Parameters:
    ///   - queueManager: The manager shared by every part of the app that should coalesce.
    ///   - service: Loads the user.
    public init(queueManager: OperationQueueManager, service: UserService) {
        self.queueManager = queueManager
        self.service = service
    }

    /// Fetches the user, joining a fetch already in flight.
    ///
    /// - Parameters:
    ///   - callBackQueue: Where `completionHandler` runs; nil, the default, runs it on the thread
    ///     that finishes the fetch.
    ///   - completionHandler: Called once with the user, the fetch's error, or a `CoalescingError`
    ///     or `CancellationError`.
    /// - Returns: A handle that withdraws this caller only.
    @discardableResult
    public func fetchUser(
        callBackQueue: OperationQueue? = nil,
        completionHandler: @escaping @Sendable (Result<User, Error>) -> Void
    ) -> CoalescingHandle<User> {
        queueManager.enqueue(
            identifier: UserFetchOperation.identifier, callBackQueue: callBackQueue,
            makeOperation: { UserFetchOperation(service: service) }, completionHandler: completionHandler)
    }

    /// Fetches the user, joining a fetch already in flight. Cancelling the calling task
    /// withdraws this caller only.
    ///
    /// - Returns: The user.
    /// - Throws: The fetch's error, or `CancellationError`.
    public func user() async throws -> User {
        try await queueManager.value(identifier: UserFetchOperation.identifier) {
            UserFetchOperation(service: service)
        }
    }
}
