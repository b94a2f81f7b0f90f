import CoalescingOperations
import Foundation

/// Fetches the signed-in user. Every `UserFetchOperation` does the same work, so all of them
/// coalesce while one is in flight: the tab bar, the profile header and the notification badge
/// asking at launch cost one fetch.
public final class UserFetchOperation: CoalescibleOperation<User>, @unchecked Sendable {
    // @unchecked: adds only an immutable service to CoalescibleOperation.

    /// The identifier shared by every user fetch.
    public static let identifier = "UserFetchOperation"

    private let service: UserService

    /// Creates a fetch whose caller is `completionHandler`.
    ///
    /// - Parameters:
    ///   - service: Loads the user.
    ///   - callBackQueue: Where `completionHandler` runs.
    ///   - completionHandler: Called once with the user, an error, or
    ///     `ConcurrentOperationError.cancelled`.
    public init(
        service: UserService,
        callBackQueue: OperationQueue = OperationQueue.current ?? .main,
        completionHandler: @escaping (Result<User, Error>) -> Void
    ) {
        self.service = service
        super.init(identifier: Self.identifier, callBackQueue: callBackQueue, completionHandler: completionHandler)
    }

    /// Creates a fetch with no caller of its own, for `OperationQueueManager.value(of:)` and the
    /// manager's closure-based `enqueue`.
    ///
    /// - Parameter service: Loads the user.
    public init(service: UserService) {
        self.service = service
        super.init(identifier: Self.identifier)
    }

    /// Loads the user and finishes with the result.
    public override func main() {
        service.load { self.finish(result: $0) }
    }
}
