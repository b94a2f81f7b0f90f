// What the migration's "before" samples name without declaring, for the states of the library
// they were written against (0.1.0, e9b6a1d; main at 0e715cf). `.ci/samples` builds the library as
// it was at the commit a "before" block names, from the repository's history, and compiles the
// block against it and this module. Only the app's own pieces live here, as in SampleSupport.swift:
// this module uses nothing of the library, so that it compiles against every state of it.

@_exported import CoalescingOperations
@_exported import Foundation

/// The signed-in user, as the first release's Getting started article had it.
public struct User: Sendable {
    /// The user's name.
    public let name: String
}

/// A feed of posts.
public struct Feed: Sendable {
    /// The posts' titles.
    public let titles: [String]
}

/// The app's backend.
public struct API: Sendable {
    /// Fetches the user, calling back once on any thread.
    public func fetchUser(completion: @escaping @Sendable (Result<User, Error>) -> Void) {
        completion(.success(User(name: "Ada")))
    }

    /// Fetches the home feed.
    public func feed() async throws -> Feed { Feed(titles: ["home"]) }
}

/// The backend a sample calls.
public let api = API()

/// The manager a sample reads, shared by the whole app.
public let manager = OperationQueueManager()
