import CoalescingHTTP
import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// A request as the contract sends it, whichever client sends it.
public struct ContractRequest: Sendable {
    /// The method: `GET`.
    public var method: String
    /// The full URL.
    public var url: String
    /// The header fields.
    public var headers: [(name: String, value: String)]
    /// The body, if any.
    public var body: Data?

    /// Creates a request.
    ///
    /// - Parameters:
    ///   - url: The full URL.
    ///   - method: The method; `GET` by default.
    ///   - headers: The header fields.
    ///   - body: The body, if any.
    public init(
        _ url: String, method: String = "GET", headers: [(name: String, value: String)] = [], body: Data? = nil
    ) {
        (self.method, self.url, self.headers, self.body) = (method, url, headers, body)
    }
}

/// A response as the contract reads it: its status and its whole body.
public struct ContractResponse: Sendable {
    /// The status code.
    public let status: Int
    /// The whole body.
    public let body: Data

    /// Creates a response.
    ///
    /// - Parameters:
    ///   - status: The status code.
    ///   - body: The whole body.
    public init(status: Int, body: Data) { (self.status, self.body) = (status, body) }

    /// The body as UTF-8.
    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// The one control surface both coalescing HTTP clients offer, as the contract drives it: each
/// client's tests adapt their client to it, and run ``HTTPContract/clauses`` against it.
public protocol ContractClient: Sendable {
    /// Sends the request, or joins the identical one in flight.
    func send(
        _ request: ContractRequest, sharing: HTTPSharing, timeout: Duration?,
        progress: (@Sendable (WorkProgress) -> Void)?
    ) async throws -> ContractResponse
    /// The key the request is coalesced under.
    func key(for request: ContractRequest, sharing: HTTPSharing) throws -> HTTPRequestKey
    /// Lets the next identical request be sent anew.
    func forget(_ request: ContractRequest, sharing: HTTPSharing) -> Bool
    /// Cancels the request in flight for every caller.
    func cancel(_ request: ContractRequest, sharing: HTTPSharing) -> Bool
    /// What the client has done so far.
    var statistics: CoalescingStatistics { get }
}

extension ContractClient {
    func send(
        _ request: ContractRequest, sharing: HTTPSharing = .automatic, timeout: Duration? = nil,
        progress: (@Sendable (WorkProgress) -> Void)? = nil
    ) async throws -> ContractResponse {
        try await send(request, sharing: sharing, timeout: timeout, progress: progress)
    }
}

/// Makes the client under test, sending to a server, with a body limit and an observer.
public typealias ContractClientMaker =
    @Sendable (_ maximumBodySize: Int, _ observer: (@Sendable (CoalescingEvent<HTTPRequestKey>) -> Void)?)
    async throws -> any ContractClient

/// The behaviour both `CoalescingURLSession` and `CoalescingHTTPClient` promise (Guarantees 36 and
/// 40 to 43), written once and run against each over a real socket, so that the two cannot drift.
///
/// The server (a ``LoopbackServer``) answers:
/// - `/hold` and `/status/<code>`: once ``ContractServer/release(_:)`` lets it, `<n> <auth>
///   <language> <body>` (`n` the path's count when it arrived; URLSession adds an
///   `Accept-Language` of its own), or that status;
/// - `/now`: `now` at once; `/large`: 1,000 bytes with `Content-Length`; `/chunked`: 1,000 bytes
///   in chunks; `/parts`: 300 bytes with `Content-Length`.
public enum HTTPContract {
    /// Each clause of the contract, by name: the behaviour it checks, and the guarantee.
    public static let clauses: [(name: String, check: @Sendable (ContractClientMaker) async throws -> Void)] = [
        ("Guarantee 36: identical GETs in flight send one request, every caller its body", identicalGets),
        ("Guarantee 36: a request after the last one ended is sent anew", sentAnewAfterTheEnd),
        ("Guarantee 36: after a forget the next request is sent anew", forgetSendsAnew),
        ("Guarantee 40: Authorization or Accept-Language twins send two requests", credentialTwins),
        ("Guarantee 40: events describe requests without header values", eventsWithoutValues),
        ("Guarantee 41: a POST goes once per caller unless a sharing key opts it in", postsPerCaller),
        ("Guarantee 41: different bodies under one sharing key are kept apart", bodiesKeptApart),
        ("Guarantee 42: an error status is the response of every caller", errorStatus),
        ("Guarantee 42: a body over the limit fails every caller", bodyOverTheLimit),
        ("Guarantee 42: an invalid request fails at once and sends nothing", invalidRequest),
        ("Guarantee 43: a cancelled caller withdraws alone", cancelledCallerAlone),
        ("Guarantee 43: cancel ends the request for every caller", cancelForEveryone),
        ("Guarantee 43: a deadline ends one caller's wait only", deadlinePerCaller),
        ("Guarantee 43: every caller that asks receives the transfer's progress", progressForEveryCaller),
    ]

    static func identicalGets(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        let request = ContractRequest(server.url("/hold"))
        let callers = (0..<20).map { _ in Task { try await http.send(request) } }
        await waitUntil("19 callers joined") { http.statistics.callersJoined == 19 }
        server.release(1)
        for caller in callers {
            let response = try await caller.value
            XCTAssertEqual(response.status, 200)
            XCTAssertTrue(response.text.hasPrefix("1 "), response.text)
        }
        XCTAssertEqual(server.requestCount("/hold"), 1)
        XCTAssertEqual(http.statistics.workStarted, 1)
    }

    static func sentAnewAfterTheEnd(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        for _ in 0..<2 { _ = try await http.send(ContractRequest(server.url("/now"))) }
        XCTAssertEqual(server.requestCount("/now"), 2)
    }

    static func forgetSendsAnew(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        let request = ContractRequest(server.url("/hold"))
        let first = Task { try await http.send(request) }
        await waitUntil("the first request arrived") { server.requestCount("/hold") == 1 }
        XCTAssertTrue(http.forget(request, sharing: .automatic))
        let second = Task { try await http.send(request) }
        await waitUntil("the second request arrived") { server.requestCount("/hold") == 2 }
        server.release(2)
        let answers = try await [first.value.text, second.value.text]
        XCTAssertEqual(Set(answers.map { $0.prefix(2) }), ["1 ", "2 "])
    }

    static func credentialTwins(_ make: ContractClientMaker) async throws {
        for (name, position) in [("Authorization", 1), ("Accept-Language", 2)] {
            let server = ContractServer()
            defer { server.stop() }
            let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
            let values = ["a", "a", "b", "b"]
            let twins = values.map { value in
                Task { try await http.send(ContractRequest(server.url("/hold"), headers: [(name, value)])) }
            }
            await waitUntil("two requests sent, two callers joined") {
                server.requestCount("/hold") == 2 && http.statistics.callersJoined == 2
            }
            server.release(2)
            for (value, twin) in zip(values, twins) {
                let fields = try await twin.value.text.split(separator: " ", omittingEmptySubsequences: false)
                XCTAssertEqual(fields[position], Substring(value), name)
            }
        }
    }

    static func eventsWithoutValues(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let log = LockedBox<[String]>([])
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize) { event in
            log.mutate { $0.append("\(event)") }
        }
        let request = ContractRequest(server.url("/now"), headers: [("Authorization", "Bearer secret-token")])
        _ = try await http.send(request)
        await waitUntil("the work's end was reported") { log.value.contains { $0.hasPrefix("workEnded") } }
        XCTAssertTrue(log.value.allSatisfy { !$0.contains("secret-token") }, "\(log.value)")
        XCTAssertTrue(log.value[0].contains("[authorization]"), log.value[0])
    }

    static func postsPerCaller(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        let post = ContractRequest(server.url("/hold"), method: "POST")
        let posts = (0..<3).map { _ in Task { try await http.send(post) } }
        await waitUntil("three POSTs arrived") { server.requestCount("/hold") == 3 }
        server.release(3)
        for post in posts { _ = try await post.value }
        XCTAssertEqual(http.statistics.callersJoined, 0)

        let keyed = (0..<3).map { _ in Task { try await http.send(post, sharing: .key("order-17")) } }
        await waitUntil("two callers joined") { http.statistics.callersJoined == 2 }
        server.release(1)
        for post in keyed {
            let answer = try await post.value.text
            XCTAssertTrue(answer.hasPrefix("4 "), answer)
        }
        XCTAssertEqual(server.requestCount("/hold"), 4)
    }

    static func bodiesKeptApart(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        let bodies = ["first", "second"]
        let posts = bodies.map { body in
            Task {
                try await http.send(
                    ContractRequest(server.url("/hold"), method: "POST", body: Data(body.utf8)),
                    sharing: .key("order-17"))
            }
        }
        await waitUntil("both POSTs arrived") { server.requestCount("/hold") == 2 }
        server.release(2)
        for (body, post) in zip(bodies, posts) {
            let answer = try await post.value.text
            XCTAssertTrue(answer.hasSuffix(" \(body)"), answer)
        }
        XCTAssertEqual(http.statistics.callersJoined, 0)
    }

    static func errorStatus(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        let codes = [404, 404, 404, 500, 500, 500]
        let callers = codes.map { code in Task { try await http.send(ContractRequest(server.url("/status/\(code)"))) } }
        await waitUntil("four callers joined") { http.statistics.callersJoined == 4 }
        server.release(2)
        for (code, caller) in zip(codes, callers) {
            let status = try await caller.value.status
            XCTAssertEqual(status, code)
        }
        XCTAssertEqual(server.requestCount("/status/404") + server.requestCount("/status/500"), 2)
    }

    static func bodyOverTheLimit(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(100, nil)
        for path in ["/large", "/chunked"] {
            let callers = (0..<3).map { _ in Task { try await http.send(ContractRequest(server.url(path))) } }
            for caller in callers {
                do {
                    _ = try await caller.value
                    XCTFail("\(path): expected bodyTooLarge")
                } catch {
                    XCTAssertEqual(error as? HTTPCoalescingError, .bodyTooLarge(url: server.url(path), limit: 100))
                }
            }
        }
        let small = try await http.send(ContractRequest(server.url("/now")))
        XCTAssertEqual(small.text, "now")
    }

    static func invalidRequest(_ make: ContractClientMaker) async throws {
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        for url in ["ftp://example.com/file", "http:///path"] {
            do {
                _ = try await http.send(ContractRequest(url))
                XCTFail("expected invalidRequest for \(url)")
            } catch {
                guard case HTTPCoalescingError.invalidRequest = error else { return XCTFail("\(url): \(error)") }
            }
        }
        XCTAssertEqual(http.statistics.workStarted, 0)
    }

    static func cancelledCallerAlone(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        let request = ContractRequest(server.url("/hold"))
        let leaving = Task { try await http.send(request) }
        let staying = Task { try await http.send(request) }
        await waitUntil("two callers wait") { http.statistics.callersWaiting == 2 }
        leaving.cancel()
        await XCTAssertThrowsCancellation(try await leaving.value)
        server.release(1)
        let status = try await staying.value.status
        XCTAssertEqual(status, 200)
        XCTAssertEqual(server.requestCount("/hold"), 1)
    }

    static func cancelForEveryone(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        let request = ContractRequest(server.url("/hold"))
        let callers = (0..<2).map { _ in Task { try await http.send(request) } }
        await waitUntil("the request is sent and joined") {
            server.requestCount("/hold") == 1 && http.statistics.callersJoined == 1
        }
        XCTAssertTrue(http.cancel(request, sharing: .automatic))
        for caller in callers { await XCTAssertThrowsCoalescingError(.cancelled, try await caller.value) }
        XCTAssertFalse(http.cancel(request, sharing: .automatic), "nothing is in flight any more")
    }

    static func deadlinePerCaller(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        let request = ContractRequest(server.url("/hold"))
        let patient = Task { try await http.send(request) }
        await waitUntil("the request arrived") { server.requestCount("/hold") == 1 }
        await XCTAssertThrowsCoalescingError(.timedOut, try await http.send(request, timeout: .milliseconds(50)))
        server.release(1)
        let status = try await patient.value.status
        XCTAssertEqual(status, 200)
        XCTAssertEqual(http.statistics.callersTimedOut, 1)
    }

    static func progressForEveryCaller(_ make: ContractClientMaker) async throws {
        let server = ContractServer()
        defer { server.stop() }
        let http = try await make(CoalescingURLSession.defaultMaximumBodySize, nil)
        let seen = [LockedBox<[WorkProgress]>([]), LockedBox<[WorkProgress]>([])]
        let callers = seen.map { seen in
            Task {
                let record: @Sendable (WorkProgress) -> Void = { progress in seen.mutate { $0.append(progress) } }
                return try await http.send(ContractRequest(server.url("/parts")), progress: record)
            }
        }
        for caller in callers {
            let body = try await caller.value.body
            XCTAssertEqual(body.count, 300)
        }
        for seen in seen { XCTAssertEqual(seen.value.last, WorkProgress(completed: 300, total: 300), "\(seen.value)") }
    }
}

/// The contract's server: a ``LoopbackServer`` whose held paths wait for ``release(_:)``.
final class ContractServer: Sendable {
    private let held = Gate()
    private let server: LoopbackServer

    init() {
        let held = held
        server = LoopbackServer { request in
            let path = request.path
            if path.hasPrefix("/status/") {
                _ = held.wait()
                return LoopbackServer.Response(status: Int(path.dropFirst(8)) ?? 500)
            }
            switch path {
            case "/now": return .text("now")
            case "/large": return LoopbackServer.Response(body: .bytes(Data(repeating: 7, count: 1_000)))
            case "/chunked": return LoopbackServer.Response(body: .stream(total: 1_000, statedLength: nil))
            case "/parts": return LoopbackServer.Response(body: .stream(total: 300, statedLength: 300))
            default:
                _ = held.wait()
                let fields = [
                    request.headers["authorization"] ?? "", request.headers["accept-language"] ?? "",
                    String(decoding: request.body, as: UTF8.self),
                ]
                return .text(([String(request.sequence)] + fields).joined(separator: " "))
            }
        }
    }

    func url(_ path: String) -> String { server.url(path).absoluteString }
    func requestCount(_ path: String) -> Int { server.requestCount(path) }
    /// Lets `count` held answers go.
    func release(_ count: Int) { for _ in 0..<count { held.open() } }
    func stop() { server.stop() }
}
