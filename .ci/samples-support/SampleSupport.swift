// What the documentation's samples name without declaring, so that each sample can stay short.
// `.ci/samples` compiles every sample against this module. Only the app's own pieces live here
// (a backend, its models, the values a sample is handed); everything the library provides, and
// the one `UserFetchOperation`, come from the real modules. It re-exports nothing: a sample that
// shows its imports is compiled with exactly those, and one that shows none as a fragment of an
// app that imports the library, the examples and Foundation (see .ci/samples).

import CoalescingOperations
import Examples
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A profile, as the samples' backend returns it.
public struct Profile: Sendable {
    /// The profile's identifier.
    public let id: String
}

/// A feed of posts.
public struct Feed: Sendable {
    /// The posts' titles.
    public let titles: [String]
}

/// Which feed a prefetch or a screen asks for.
public enum FeedKey: Hashable, Sendable {
    /// The explore tab's feed.
    case explore
    /// The home tab's feed.
    case home
}

/// The samples' backend: async calls that return at once.
public struct API: Sendable {
    /// Fetches a profile.
    public func fetchProfile(id: String) async throws -> Profile { Profile(id: id) }
    /// Saves a profile.
    public func save(_ profile: Profile) async throws {}
    /// Fetches the home feed.
    public func feed() async throws -> Feed { Feed(titles: ["home"]) }
    /// Fetches the explore feed.
    public func exploreFeed() async throws -> Feed { Feed(titles: ["explore"]) }
    /// Fetches the signed-in user, calling back once on any thread.
    public func fetchUser(completion: @escaping @Sendable (Result<User, Error>) -> Void) {
        completion(.success(User(id: 1, name: "Ada", email: "ada@example.com")))
    }
}

/// Loads the data behind a URL (a thumbnail, an avatar), calling back once on any thread.
public struct ThumbnailLoader: Sendable {
    /// Creates a loader.
    public init() {}

    /// Loads `url`.
    public func load(_ url: URL, completion: @escaping @Sendable (Result<Data, Error>) -> Void) {
        completion(.success(Data(url.absoluteString.utf8)))
    }
}

/// Fetches a profile through the samples' backend: the operation a view model's samples enqueue.
public final class ProfileFetchOperation: CoalescibleOperation<Profile>, @unchecked Sendable {
    // @unchecked: restated as Swift requires of an `Operation` subclass; adds only a `let`.
    private let api: API

    /// Creates a fetch with no caller of its own.
    public init(api: API) {
        self.api = api
        super.init(identifier: "profile")
    }

    /// Fetches the profile and finishes with it.
    public override func main() {
        Task { [api] in
            do {
                finish(result: .success(try await api.fetchProfile(id: "me")))
            } catch {
                finish(result: .failure(error))
            }
        }
    }
}

/// The backend a sample calls.
public let api = API()
/// The URL loader a sample calls.
public let loader = ThumbnailLoader()
/// The user service a sample hands to `UserFetchOperation`.
public let service = UserService { $0(.success(User(id: 1, name: "Ada", email: "ada@example.com"))) }
/// The manager a sample enqueues on, shared by the whole app.
public let manager = OperationQueueManager()
/// The queue a sample is called back on.
public let queue = OperationQueue()
/// The coalescer a sample fetches the feed through.
public let coalescer = InFlightTaskCoalescer<String, Feed>()
/// The URL a sample requests.
public let url = URL(string: "http://127.0.0.1:8080/2.3/questions?page=1&site=stackoverflow")!
/// The session a sample requests through.
public let session = URLSession(configuration: .ephemeral)
