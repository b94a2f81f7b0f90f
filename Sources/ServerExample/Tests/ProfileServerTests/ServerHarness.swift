import AsyncHTTPClient
import CoalescingOperations
import Foundation
import Logging
import NIOCore
import ProfileServer
import ProfileUpstream
import ServerSupport

// Test equipment: the upstream and the profile server on loopback ports the system chose, with
// real HTTP clients on both sides, and what the server's coalescer did, to wait on.

/// What the server's coalescer did, from its events.
struct Seen: Sendable, Equatable {
    /// Requests that started a load or joined one.
    var arrivals = 0
    /// Requests that withdrew: their client disconnected.
    var withdrawn = 0
    /// Requests whose timeout passed.
    var timedOut = 0
    /// Loads that ended.
    var ended = 0

    mutating func record(_ event: CoalescingEvent<String>) {
        switch event {
        case .workStarted, .callerJoined: arrivals += 1
        case .callerWithdrawn(_, _, .withdrawn): withdrawn += 1
        case .callerWithdrawn(_, _, .timedOut): timedOut += 1
        case .workEnded: ended += 1
        case .priorityChanged, .workStalled: break
        }
    }
}

/// One answer of the server, as a client read it.
struct Answer: Sendable, Equatable {
    var status: Int
    var body: String

    /// The profile in the body, if it is one; its fields come in any order.
    var profile: Profile? {
        try? JSONDecoder().decode(Profile.self, from: Data(body.utf8))
    }
}

/// The upstream, the server in front of it, and a client of the server.
struct ServerHarness: Sendable {
    let upstream: ProfileUpstream
    let loader: ProfileLoader
    let seen = Watched(Seen())
    private let upstreamServer: RunningServer
    private let server: RunningServer
    private let loaderClient: HTTPClient
    private let client: HTTPClient

    /// Starts the upstream and the server; stop them with ``stop()``.
    static func start(
        upstream: ProfileUpstream,
        timeout: Duration? = .seconds(10), whenAbandoned: AbandonedWorkPolicy = .cancel, coalescing: Bool = true,
        observability: Observability = Observability()
    ) async throws -> ServerHarness {
        var quiet = Logger(label: "test")
        quiet.logLevel = .error
        let upstreamServer = try await RunningServer.start(upstream.router, logger: quiet)
        return try await ServerHarness(
            upstream: upstream, upstreamServer: upstreamServer,
            options: .init(
                upstream: upstreamServer.url, timeout: timeout, whenAbandoned: whenAbandoned, coalescing: coalescing),
            observability: observability, logger: quiet)
    }

    private init(
        upstream: ProfileUpstream, upstreamServer: RunningServer, options: ProfileLoader.Options,
        observability: Observability, logger: Logger
    ) async throws {
        self.upstream = upstream
        self.upstreamServer = upstreamServer
        loaderClient = Self.makeClient()
        client = Self.makeClient()
        let seen = seen
        loader = ProfileLoader(options: options, client: loaderClient, observability: observability) { event in
            seen.update { $0.record(event) }
        }
        server = try await RunningServer.start(makeRouter(loader: loader), logger: logger)
    }

    /// A client that opens as many connections as a test's clients send requests at once.
    private static func makeClient() -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(30), concurrentHTTP1ConnectionsPerHostSoftLimit: 128)
        return HTTPClient(configuration: configuration)
    }

    /// Sends `GET path` to the server, as a browser would; cancelling the calling task disconnects.
    /// The profile server's port on 127.0.0.1.
    var port: Int { server.port }

    func get(_ path: String) async throws -> Answer {
        let response = try await client.execute(HTTPClientRequest(url: server.url + path), timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 20)
        return Answer(status: Int(response.status.code), body: String(buffer: body))
    }

    /// Starts `count` concurrent requests for `path`, and returns once the server's coalescer has
    /// seen every one of them arrive (on top of `arrivedBefore`).
    func burst(_ count: Int, of path: String, arrivedBefore: Int = 0) async throws -> [Task<Answer, any Error>] {
        let requests = (0..<count).map { _ in Task { try await get(path) } }
        try await seen.wait { $0.arrivals >= arrivedBefore + count }
        return requests
    }

    /// Stops both servers and both clients.
    func stop() async throws {
        await server.stop()
        await upstreamServer.stop()
        try await client.shutdown()
        try await loaderClient.shutdown()
    }
}
