import Foundation

/// A tiny HTTP/1.1 server on 127.0.0.1 that answers canned responses, for tests and demos.
///
/// The server starts listening on a kernel-chosen port as soon as it is created and keeps serving until ``stop()``
/// is called or the last reference to it goes away. Every connection carries one request and is closed after the
/// response (`Connection: close`). Requests are matched by path, ignoring the query; unknown paths get a `404`.
///
/// Besides answering, the server records what it saw, and offers hooks that let a test control timing without
/// sleeping: ``holdResponses()`` and ``releaseResponses()`` park responses, ``waitForRequests(_:timeout:)`` waits
/// until requests have arrived, and ``abandonedRequestCount`` tells how many clients hung up while their response was
/// held or delayed.
///
/// ```swift
/// let server = try FixtureHTTPServer(routes: ["/users/42": .json(FixtureHTTPServer.Fixtures.userJSON)])
/// defer { server.stop() }
/// let (data, _) = try await URLSession.shared.data(from: server.url(for: "/users/42"))
/// ```
public final class FixtureHTTPServer: Sendable {
    /// The port the server listens on.
    public let port: UInt16

    /// The server's root URL, `http://127.0.0.1:<port>`, without a trailing slash.
    public let baseURL: URL

    private let core: ServerCore

    /// Creates a server and starts listening on 127.0.0.1 at a free port.
    ///
    /// - Parameter routes: Responses by path, such as `["/2.3/questions": .json(…)]`; more can be added later with
    ///   ``setRoute(_:_:)``.
    /// - Throws: ``FixtureHTTPServerError`` if the socket cannot be created, bound or listened on.
    public init(routes: [String: FixtureResponse] = [:]) throws {
        var normalizedRoutes: [String: FixtureResponse] = [:]
        for (path, response) in routes {
            normalizedRoutes[Self.routeKey(path)] = response
        }
        core = try ServerCore(routes: normalizedRoutes)
        port = core.port
        baseURL = URL(string: "http://127.0.0.1:\(core.port)")!
    }

    deinit {
        core.stop()
    }

    /// Builds a URL on this server.
    ///
    /// - Parameter pathAndQuery: A percent-encoded path with an optional query, such as
    ///   `/2.3/questions?site=stackoverflow`; text that is not a valid URL traps.
    /// - Returns: The absolute URL.
    public func url(for pathAndQuery: String) -> URL {
        let suffix = pathAndQuery.hasPrefix("/") ? pathAndQuery : "/" + pathAndQuery
        return URL(string: baseURL.absoluteString + suffix)!
    }

    /// Sets, or replaces, the response for a path.
    ///
    /// - Parameters:
    ///   - path: The path to answer, such as `/users/42`; a query, if given, is dropped, since matching ignores it.
    ///   - response: What to answer; requests already waiting keep the response they were given on arrival.
    public func setRoute(_ path: String, _ response: FixtureResponse) {
        core.state.withLock { $0.routes[Self.routeKey(path)] = response }
    }

    /// Makes responses to requests that arrive from now on wait until ``releaseResponses()``.
    ///
    /// The requests are still counted on arrival, so ``waitForRequests(_:timeout:)`` sees them.
    public func holdResponses() {
        core.state.withLock { $0.isHeld = true }
    }

    /// Sends every held response (after any delay it still has to serve) and stops holding new ones.
    public func releaseResponses() {
        core.state.withLock { state in
            guard state.isHeld else { return }
            state.isHeld = false
            state.releaseGeneration += 1
            state.wakeAll()
        }
    }

    /// The number of requests received so far, on every path.
    public var requestCount: Int {
        core.state.withLock { $0.requests.count }
    }

    /// The number of requests received so far on one path.
    ///
    /// - Parameter path: The path to count, without a query.
    /// - Returns: How many requests targeted that path, whatever their query.
    public func requestCount(path: String) -> Int {
        let key = Self.routeKey(path)
        return core.state.withLock { $0.requests.count(where: { $0.path == key }) }
    }

    /// Every request received so far, in arrival order.
    public var receivedRequests: [FixtureRequest] {
        core.state.withLock { $0.requests }
    }

    /// The number of requests whose client closed the connection before the response was written.
    ///
    /// A hang-up is only noticed while a response is held or delayed (or if writing it fails), which is exactly when
    /// a test can cancel a request in flight.
    public var abandonedRequestCount: Int {
        core.state.withLock { $0.abandonedRequestCount }
    }

    /// Blocks until at least `count` requests have been received in total, or until `timeout` passes.
    ///
    /// - Parameters:
    ///   - count: The total number of requests to wait for, counted since the server started.
    ///   - timeout: The longest time to wait.
    /// - Returns: `true` if `count` requests arrived in time; `false` on timeout or if the server was stopped.
    public func waitForRequests(_ count: Int, timeout: Duration) -> Bool {
        _ = core.state.wait(until: Self.deadline(after: timeout)) { $0.requests.count >= count || $0.isStopped }
        return requestCount >= count
    }

    /// Blocks until at least `count` requests have been abandoned by their clients, or until `timeout` passes.
    ///
    /// - Parameters:
    ///   - count: The total number of abandoned requests to wait for, counted since the server started.
    ///   - timeout: The longest time to wait.
    /// - Returns: `true` if `count` requests were abandoned in time; `false` on timeout or if the server was stopped.
    public func waitForAbandonedRequests(_ count: Int, timeout: Duration) -> Bool {
        _ = core.state.wait(until: Self.deadline(after: timeout)) { $0.abandonedRequestCount >= count || $0.isStopped }
        return abandonedRequestCount >= count
    }

    /// Suspends until at least `count` requests have been received in total, or until `timeout` passes.
    ///
    /// The blocking wait runs on a Dispatch worker thread, so that it cannot starve Swift concurrency's small
    /// cooperative thread pool while the requests it waits for need that pool to be sent. Task cancellation does not
    /// end the wait early; the timeout does.
    ///
    /// - Parameters:
    ///   - count: The total number of requests to wait for, counted since the server started.
    ///   - timeout: The longest time to wait.
    /// - Returns: `true` if `count` requests arrived in time; `false` on timeout or if the server was stopped.
    public func waitForRequests(_ count: Int, timeout: Duration) async -> Bool {
        await Self.offloaded { self.waitForRequests(count, timeout: timeout) }
    }

    /// Suspends until at least `count` requests have been abandoned by their clients, or until `timeout` passes.
    ///
    /// As in the async `waitForRequests(_:timeout:)`, the blocking wait runs on a Dispatch worker thread.
    ///
    /// - Parameters:
    ///   - count: The total number of abandoned requests to wait for, counted since the server started.
    ///   - timeout: The longest time to wait.
    /// - Returns: `true` if `count` requests were abandoned in time; `false` on timeout or if the server was stopped.
    public func waitForAbandonedRequests(_ count: Int, timeout: Duration) async -> Bool {
        await Self.offloaded { self.waitForAbandonedRequests(count, timeout: timeout) }
    }

    /// Stops accepting connections, closes open ones without answering, and waits for the server's threads to end.
    ///
    /// Held responses are not sent. Later connection attempts are refused. Calling it again does nothing; it is also
    /// called when the server is deallocated.
    public func stop() {
        core.stop()
    }

    private static func routeKey(_ path: String) -> String {
        let withoutQuery = String(path.prefix { $0 != "?" })
        return withoutQuery.hasPrefix("/") ? withoutQuery : "/" + withoutQuery
    }

    private static func offloaded(_ wait: @escaping @Sendable () -> Bool) async -> Bool {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: wait()) }
        }
    }

    private static func deadline(after timeout: Duration) -> Date {
        let (seconds, attoseconds) = timeout.components
        return Date(timeIntervalSinceNow: Double(seconds) + Double(attoseconds) / 1e18)
    }
}
