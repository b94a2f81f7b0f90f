import CoalescingHTTP
import CoalescingOperations
import Foundation
import TestSupport
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A coalescing URLSession against a real HTTP server over a socket on loopback, where the stub's
/// in-process URLProtocol cannot show it: bodies sent as fast as loopback allows, and endless
/// ones (Guarantee 42).
final class CoalescingURLSessionOverASocketTests: XCTestCase {
    /// The limit the large bodies are sent against.
    private let limit = 8 << 20
    /// How long a transfer may take to end once its callers are answered. FoundationNetworking
    /// carries the cancel out on the queue that also takes the body's bytes, which a body at
    /// loopback speed keeps busy: under ThreadSanitizer on a loaded 2-core machine the close came
    /// after more than 60 s (it takes 1-2 s when the machine is quiet).
    private let stopBound = 180.0

    /// Guarantee 42: a body without end, as the client sees it (chunked, no length), sent as fast
    /// as loopback allows, fails every caller at the limit: each hears `bodyTooLarge`, memory grows
    /// by about the limit, not by what the server sent, and the transfer ends. With
    /// FoundationNetworking the cancel waits for the session's queue, which such a body can hold
    /// until it ends: about 1 in 30 runs, and most under ThreadSanitizer, it read all 4 GiB the
    /// server sends at most, and dropped them. So the server stops after 256 MiB (32 times the
    /// limit, and still no length), and the transfer ends either way: the client closes the
    /// connection, or the body has been read and dropped.
    func testABodyWithoutEndFailsEveryCallerAndItsTransferEnds() async throws {
        let server = LoopbackServer { _ in LoopbackServer.Response(body: .stream(total: 256 << 20, statedLength: nil)) }
        defer { server.stop() }
        try await expectRefused(from: server)
        await waitUntil("the transfer ended", seconds: stopBound) {
            server.streamsClosedByTheClient("/body") == 1 || server.bodyBytesSent("/body") == 256 << 20
        }
    }

    /// Guarantee 42: a 512 MiB body, with or without `Content-Length`, fails every caller as it
    /// passes the limit, and the process keeps no more than about the limit of it, however much
    /// of it FoundationNetworking reads before its cancel takes.
    func testAHugeBodyFailsEveryCallerAndKeepsMemoryBounded() async throws {
        for stated in [nil, 512 << 20] {
            let server = LoopbackServer { _ in
                LoopbackServer.Response(body: .stream(total: 512 << 20, statedLength: stated))
            }
            defer { server.stop() }
            try await expectRefused(from: server)
            await waitUntil("the transfer ended", seconds: stopBound) {
                server.streamsClosedByTheClient("/body") == 1 || server.bodyBytesSent("/body") == 512 << 20
            }
        }
    }

    /// Guarantee 42: a `Content-Length` over the limit fails every caller as the header arrives,
    /// while the body has not been sent.
    func testAStatedLengthOverTheLimitFailsEveryCallerBeforeTheBody() async throws {
        let body = Gate()
        let server = LoopbackServer { _ in
            LoopbackServer.Response(body: .stream(total: 64 << 20, statedLength: 64 << 20), bodyWaitsFor: body)
        }
        defer { server.stop() }
        let http = CoalescingURLSession(configuration: .ephemeral, maximumBodySize: 1 << 20)
        let callers = (0..<3).map { _ in Task { try await http.data(for: URLRequest(url: server.url("/big"))) } }
        for caller in callers {
            await expectBodyTooLarge(caller, url: server.url("/big"), limit: 1 << 20)
        }
        XCTAssertEqual(server.bodyBytesSent("/big"), 0, "the callers were answered before the body was sent")
        body.open()
        await waitUntil("the transfer ended", seconds: stopBound) {
            server.streamsClosedByTheClient("/big") == 1 || server.bodyBytesSent("/big") == 64 << 20
        }
    }

    /// Sends the server's `/body` to three callers of one request, and checks that they hear
    /// `bodyTooLarge` and that the process grew by no more than the limit and a constant: what
    /// FoundationNetworking holds in its queues until its cancel takes.
    private func expectRefused(from server: LoopbackServer, file: StaticString = #filePath, line: UInt = #line)
        async throws
    {
        let http = CoalescingURLSession(configuration: .ephemeral, maximumBodySize: limit)
        let before = residentBytes()
        let callers = (0..<3).map { _ in Task { try await http.data(for: URLRequest(url: server.url("/body"))) } }
        for caller in callers {
            await expectBodyTooLarge(caller, url: server.url("/body"), limit: limit, file: file, line: line)
        }
        if let before, let after = residentBytes() {
            XCTAssertLessThan(after - before, limit + 192 << 20, "resident memory grew", file: file, line: line)
        }
        XCTAssertEqual(http.statistics.workStarted, 1, file: file, line: line)
    }

    /// Awaits `caller`, 60 s at most, so that a body read to its end fails the test rather than
    /// hangs it, and expects `bodyTooLarge`.
    private func expectBodyTooLarge(
        _ caller: Task<(Data, URLResponse), Error>, url: URL, limit: Int, file: StaticString = #filePath,
        line: UInt = #line
    ) async {
        let deadline = Task {
            try await Task.sleep(for: .seconds(60))
            caller.cancel()
        }
        defer { deadline.cancel() }
        do {
            _ = try await caller.value
            XCTFail("expected bodyTooLarge", file: file, line: line)
        } catch {
            XCTAssertEqual(
                error as? HTTPCoalescingError, .bodyTooLarge(url: url.absoluteString, limit: limit), file: file,
                line: line)
        }
    }
}

/// The process's resident memory, from `/proc/self/statm`; nil where there is none.
private func residentBytes() -> Int? {
    guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
    let fields = statm.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
    return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// The cookies and credentials the session adds as it sends a request are in its key (Guarantee
/// 40): a login or a logout while a request is in flight keeps the next caller apart.
final class CoalescingURLSessionCookieTests: XCTestCase {
    /// A server whose `/me` answers with the session cookie's user, once `answers` lets it.
    private func makeServer(answers: Gate) -> LoopbackServer {
        LoopbackServer { request in
            switch request.path {
            case "/login": .text("ok", headers: [("Set-Cookie", "session=ada; Path=/")])
            case "/logout":
                .text("ok", headers: [("Set-Cookie", "session=gone; Path=/; Expires=Thu, 01 Jan 1970 00:00:00 GMT")])
            default:
                {
                    _ = answers.wait()
                    return .text(request.headers["cookie"]?.contains("session=ada") == true ? "Ada" : "anonymous")
                }()
            }
        }
    }

    /// Guarantee 40: an anonymous `GET /me` is in flight, a login sets a session cookie, and the
    /// next `GET /me` is sent anew with it, not joined to the anonymous one.
    func testALoginWhileARequestIsInFlightKeepsTheNextCallerApart() async throws {
        try await expectTheNextCallerApart(signedInFirst: false)
    }

    /// Guarantee 40: a signed-in `GET /me` is in flight, a logout removes the cookie, and the next
    /// `GET /me` is sent anew without it: no signed-out caller receives the signed-in answer.
    func testALogoutWhileARequestIsInFlightKeepsTheNextCallerApart() async throws {
        try await expectTheNextCallerApart(signedInFirst: true)
    }

    /// Sends `GET /me`, signs in or out while it is in flight, sends `GET /me` again, and expects
    /// two requests, each answered for the cookie it was sent with.
    private func expectTheNextCallerApart(signedInFirst: Bool) async throws {
        let answers = Gate()
        let server = makeServer(answers: answers)
        defer { server.stop() }
        let http = CoalescingURLSession(configuration: .ephemeral)
        if signedInFirst { _ = try await http.data(for: post(server.url("/login"))) }
        let first = Task { try await http.data(for: URLRequest(url: server.url("/me"))).0 }
        await waitUntil("the first request arrived") { server.requestCount("/me") == 1 }
        _ = try await http.data(for: post(server.url(signedInFirst ? "/logout" : "/login")))
        let second = Task { try await http.data(for: URLRequest(url: server.url("/me"))).0 }
        await waitUntil("the second request arrived") { server.requestCount("/me") == 2 }
        answers.open()
        answers.open()
        let (firstBody, secondBody) = try await (first.value, second.value)
        let expected = signedInFirst ? ["Ada", "anonymous"] : ["anonymous", "Ada"]
        XCTAssertEqual([firstBody, secondBody].map { String(decoding: $0, as: UTF8.self) }, expected)
    }

    /// Guarantee 40: a credential stored for the request's host and port, which the session answers
    /// a challenge with, is in the key; one stored for another host is not.
    func testACredentialStoredForTheHostIsInTheKey() throws {
        let configuration = URLSessionConfiguration.ephemeral
        let http = CoalescingURLSession(configuration: configuration)
        let request = URLRequest(url: URL(string: "https://api.example.com/me")!)
        let before = try http.key(for: request)
        let elsewhere = URLProtectionSpace(
            host: "other.example.com", port: 443, protocol: "https", realm: "api", authenticationMethod: nil)
        configuration.urlCredentialStorage?.set(
            URLCredential(user: "ada", password: "secret", persistence: .forSession), for: elsewhere)
        XCTAssertEqual(try http.key(for: request), before)
        let space = URLProtectionSpace(
            host: "api.example.com", port: 443, protocol: "https", realm: "api", authenticationMethod: nil)
        configuration.urlCredentialStorage?.set(
            URLCredential(user: "ada", password: "secret", persistence: .forSession), for: space)
        XCTAssertNotEqual(try http.key(for: request), before)
        XCTAssertFalse(try http.key(for: request).description.contains("secret"))
    }
}

private func post(_ url: URL) -> URLRequest {
    var request = URLRequest(url: url)
    request.httpMethod = "POST"
    return request
}
