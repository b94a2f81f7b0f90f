import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Canned HTTP answers for a URLSession, served in-process by a `URLProtocol` registered on the
/// session's configuration: what app developers use to test a networking layer. Test equipment,
/// and the demo's backend.
///
/// Requests reach it only from sessions whose configuration went through ``configure(_:)``, at its
/// ``baseURL``, a host of the reserved `.invalid` domain that no network resolves. It matches
/// requests by path, ignoring the query, and answers `404` to unknown paths. It counts every
/// request the session sends, can hold answers until ``releaseResponses()``, and sees a request
/// cancelled before its answer (``abandonedRequestCount``).
///
/// ```swift
/// import Foundation
/// import HTTPStub
///
/// #if canImport(FoundationNetworking)
/// import FoundationNetworking
/// #endif
///
/// let stub = HTTPStub(routes: ["/users/42": .json(HTTPStub.Fixtures.userJSON)])
/// let configuration = URLSessionConfiguration.ephemeral
/// stub.configure(configuration)
/// let session = URLSession(configuration: configuration)
/// let (data, _) = try await session.data(from: stub.url(for: "/users/42"))
/// ```
public final class HTTPStub: @unchecked Sendable {
    // @unchecked: `state` is guarded by `condition`, which also wakes the waits below.
    private struct State {
        var routes: [String: StubResponse]
        var isHeld = false
        var held: [(StubExchange, StubResponse)] = []
        var requests: [URL] = []
        var methods: [String] = []
        var tasks: [URLSessionTask] = []
        var abandonedRequestCount = 0
        var isStopped = false
    }

    /// The stub's root URL, `http://stub-<n>.invalid`, without a trailing slash.
    public let baseURL: URL
    private let condition = NSCondition()
    private var state: State

    /// Creates a stub and makes it reachable from configured sessions.
    ///
    /// - Parameter routes: Responses by path, such as `["/2.3/questions": .json(…)]`; more can be
    ///   added later with ``setRoute(_:_:)``.
    public init(routes: [String: StubResponse] = [:]) {
        state = State(routes: Dictionary(uniqueKeysWithValues: routes.map { (Self.routeKey($0.key), $0.value) }))
        let host = StubURLProtocol.reserveHost()
        baseURL = URL(string: "http://\(host)")!
        StubURLProtocol.register(self, host: host)
    }

    /// Lets sessions made with `configuration` reach this stub, and every other stub.
    ///
    /// - Parameter configuration: The configuration of the session to create.
    public func configure(_ configuration: URLSessionConfiguration) {
        configuration.protocolClasses = [StubURLProtocol.self] + (configuration.protocolClasses ?? [])
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
    }

    /// Builds a URL on this stub.
    ///
    /// - Parameter pathAndQuery: A percent-encoded path with an optional query, such as
    ///   `/2.3/questions?site=stackoverflow`.
    /// - Returns: The absolute URL.
    public func url(for pathAndQuery: String) -> URL {
        URL(string: baseURL.absoluteString + (pathAndQuery.hasPrefix("/") ? "" : "/") + pathAndQuery)!
    }

    /// Sets, or replaces, the response for a path.
    ///
    /// - Parameters:
    ///   - path: The path to answer, such as `/users/42`; a query, if given, is dropped.
    ///   - response: What to answer from now on.
    public func setRoute(_ path: String, _ response: StubResponse) {
        withState { $0.routes[Self.routeKey(path)] = response }
    }

    /// Makes the answers to requests that arrive from now on wait until ``releaseResponses()``.
    public func holdResponses() {
        withState { $0.isHeld = true }
    }

    /// Sends every held answer (after its delay) and stops holding new ones.
    public func releaseResponses() {
        let held = withState { state in
            state.isHeld = false
            defer { state.held = [] }
            return state.held
        }
        for (request, response) in held {
            request.answer(response)
        }
    }

    /// The number of requests received so far, on every path.
    public var requestCount: Int {
        withState { $0.requests.count }
    }

    /// The number of requests received so far on one path, whatever their query.
    ///
    /// - Parameter path: The path to count, without a query.
    /// - Returns: How many requests targeted that path.
    public func requestCount(path: String) -> Int {
        let key = Self.routeKey(path)
        return withState { $0.requests.count { $0.path == key } }
    }

    /// The URL of every request received so far, in arrival order.
    public var receivedRequests: [URL] {
        withState { $0.requests }
    }

    /// The method of every request received so far, in arrival order.
    public var receivedMethods: [String] {
        withState { $0.methods }
    }

    /// The session's task of every request received so far, in arrival order: what a test reads
    /// a task's priority from.
    public var receivedTasks: [URLSessionTask] {
        withState { $0.tasks }
    }

    /// The number of requests cancelled by their session before their answer.
    public var abandonedRequestCount: Int {
        withState { $0.abandonedRequestCount }
    }

    /// Blocks until at least `count` requests have been received in total, or `timeout` passes.
    ///
    /// - Parameters:
    ///   - count: The total number of requests to wait for.
    ///   - timeout: The longest time to wait.
    /// - Returns: Whether `count` requests arrived in time.
    public func waitForRequests(_ count: Int, timeout: Duration) -> Bool {
        wait(timeout) { $0.requests.count >= count }
    }

    /// Blocks until at least `count` requests have been abandoned, or `timeout` passes.
    ///
    /// - Parameters:
    ///   - count: The total number of abandoned requests to wait for.
    ///   - timeout: The longest time to wait.
    /// - Returns: Whether `count` requests were abandoned in time.
    public func waitForAbandonedRequests(_ count: Int, timeout: Duration) -> Bool {
        wait(timeout) { $0.abandonedRequestCount >= count }
    }

    /// Suspends until at least `count` requests have been received in total, or `timeout` passes.
    ///
    /// The blocking wait runs on a Dispatch worker thread, so that it cannot starve Swift
    /// concurrency's cooperative pool while the requests it waits for need it.
    ///
    /// - Parameters:
    ///   - count: The total number of requests to wait for.
    ///   - timeout: The longest time to wait.
    /// - Returns: Whether `count` requests arrived in time.
    public func waitForRequests(_ count: Int, timeout: Duration) async -> Bool {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(returning: self.waitForRequests(count, timeout: timeout))
            }
        }
    }

    /// Stops answering: held requests fail as a dropped connection would, and later ones as a
    /// refused connection would.
    public func stop() {
        let held = withState { state in
            state.isStopped = true
            defer { state.held = [] }
            return state.held
        }
        for (request, _) in held {
            request.fail(URLError(.networkConnectionLost))
        }
    }

    // MARK: From the protocol

    /// Takes a request the session sent: counts it, then answers, holds or refuses it.
    func receive(_ request: StubExchange) {
        let url = request.url
        enum Decision {
            case answer(StubResponse), hold, refuse
        }
        let decision = withState { state -> Decision in
            guard !state.isStopped else { return .refuse }
            state.requests.append(url)
            state.methods.append(request.method)
            if let task = request.task { state.tasks.append(task) }
            let response = state.routes[Self.routeKey(url.path)] ?? .status(404)
            guard state.isHeld else { return .answer(response) }
            state.held.append((request, response))
            return .hold
        }
        switch decision {
        case .answer(let response): request.answer(response)
        case .hold: break
        case .refuse: request.fail(URLError(.cannotConnectToHost))
        }
    }

    /// Counts a request its session cancelled before the answer.
    func abandon(_ request: StubExchange) {
        withState { state in
            state.abandonedRequestCount += 1
            state.held.removeAll { $0.0 === request }
        }
    }

    private func withState<T>(_ body: (inout State) -> T) -> T {
        condition.lock()
        defer {
            condition.broadcast()
            condition.unlock()
        }
        return body(&state)
    }

    private func wait(_ timeout: Duration, until isDone: (State) -> Bool) -> Bool {
        let (seconds, attoseconds) = timeout.components
        let deadline = Date(timeIntervalSinceNow: Double(seconds) + Double(attoseconds) / 1e18)
        condition.lock()
        defer { condition.unlock() }
        while !isDone(state), condition.wait(until: deadline) {}
        return isDone(state)
    }

    private static func routeKey(_ path: String) -> String {
        let withoutQuery = String(path.prefix { $0 != "?" })
        return withoutQuery.hasPrefix("/") ? withoutQuery : "/" + withoutQuery
    }
}
