import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Loads the signed-in user: the work a ``UserFetchOperation`` runs.
///
/// Inject a closure in tests, or use ``http(url:session:)`` for the real endpoint.
public struct UserService: Sendable {
    /// Loads the user and calls `completion` once, on any thread.
    public let load: @Sendable (_ completion: @escaping @Sendable (Result<User, Error>) -> Void) -> Void

    /// Creates a service from a loading closure.
    ///
    /// - Parameter load: Loads the user and calls its completion once, on any thread.
    public init(load: @escaping @Sendable (_ completion: @escaping @Sendable (Result<User, Error>) -> Void) -> Void) {
        self.load = load
    }

    /// A service that GETs the user as JSON from `url`.
    ///
    /// - Parameters:
    ///   - url: The user endpoint.
    ///   - session: The session to use.
    /// - Returns: A service whose errors are `URLError`s and ``NetworkingError``s.
    public static func http(url: URL, session: URLSession = .shared) -> UserService {
        UserService { completion in
            session.dataTask(with: url) { data, response, error in
                completion(HTTPResponseDecoder.decode(User.self, data: data, response: response, error: error))
            }.resume()
        }
    }
}
