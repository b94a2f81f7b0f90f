import CoalescingOperations
import Foundation

/// Fetches the signed-in user. Every `UserFetchOperation` does the same work, so all of them
/// coalesce while one is in flight: the tab bar, the profile header and the notification badge
/// asking at launch cost one fetch.
public final class UserFetchOperation: CoalescibleOperation<User>, @unchecked Sendable {
    // @unchecked: restated as Swift requires of an `Operation` subclass; adds only an immutable
    // service to CoalescibleOperation.

    /// The identifier shared by every user fetch.
    public static let identifier = "UserFetchOperation"

    private let service: UserService

    /// Creates a fetch whose caller, if any, is `completionHandler`.
    ///
    /// - Parameters:
    ///   - service: Loads the user.
    ///   - callBackQueue: Where `completionHandler` runs; nil runs it where the fetch finishes.
    ///   - completionHandler: Called once with the user or a failure (see `CoalescingError`); nil
    ///     for a fetch whose callers come through the manager's `value` or `identifier:` methods.
    public init(
        service: UserService,
        callBackQueue: OperationQueue? = nil,
        completionHandler: (@Sendable (Result<User, Error>) -> Void)? = nil
    ) {
        self.service = service
        super.init(identifier: Self.identifier, callBackQueue: callBackQueue, completionHandler: completionHandler)
    }

    /// Loads the user and finishes with the result.
    public override func main() {
        service.load { self.finish(result: $0) }
    }
}
