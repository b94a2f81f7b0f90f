import Dispatch
import FixtureHTTPServer
import Foundation
import TestSupport
import XCTest

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The local HTTP server that the example tests and the demo talk to: it is test equipment, so
/// these check its own behaviour (routes, delays, held requests, counts), not a guarantee of the
/// library; the tests that rely on it cite those.
final class FixtureHTTPServerTests: XCTestCase {
    private typealias Fixtures = FixtureHTTPServer.Fixtures

    private func makeServer(_ routes: [String: FixtureResponse] = [:]) throws -> FixtureHTTPServer {
        let server = try FixtureHTTPServer(routes: routes)
        addTeardownBlock { server.stop() }
        return server
    }

    private func makeClient() -> HTTPTestClient {
        let client = HTTPTestClient()
        addTeardownBlock { client.invalidate() }
        return client
    }

    // MARK: - Responses

    func testJSONRouteAnswers200WithFixtureBodyAndJSONContentType() throws {
        let server = try makeServer([Fixtures.questionsPath: .json(Fixtures.questionsPage)])

        let result = makeClient().get(server.url(for: Fixtures.questionsPath))

        XCTAssertNil(result.error)
        XCTAssertEqual(result.statusCode, 200)
        XCTAssertEqual(result.body, Fixtures.questionsPage)
        XCTAssertEqual(result.headers["content-type"]?.hasPrefix("application/json"), true)
        XCTAssertEqual(result.headers["content-length"], String(Fixtures.questionsPage.count))
    }

    func testAsyncURLSessionCallReceivesTheFixture() async throws {
        let server = try makeServer([Fixtures.userPath: .json(Fixtures.user)])
        let session = makeClient().session

        let (data, response) = try await session.data(from: server.url(for: Fixtures.userPath))

        XCTAssertEqual((response as? HTTPURLResponse)?.statusCode, 200)
        XCTAssertEqual(data, Fixtures.user)
    }

    func testUnknownPathAnswers404() throws {
        let server = try makeServer([Fixtures.userPath: .json(Fixtures.user)])

        let result = makeClient().get(server.url(for: "/no/such/path"))

        XCTAssertNil(result.error)
        XCTAssertEqual(result.statusCode, 404)
        XCTAssertEqual(server.requestCount(path: "/no/such/path"), 1)
    }

    func testStatusResponseAnswersThatCodeWithReasonPhraseBody() throws {
        let server = try makeServer(["/broken": .status(500)])

        let result = makeClient().get(server.url(for: "/broken"))

        XCTAssertEqual(result.statusCode, 500)
        XCTAssertEqual(String(decoding: result.body, as: UTF8.self), "Internal Server Error\n")
    }

    func testEmptyBodyAnswers200WithZeroContentLength() throws {
        let server = try makeServer(["/empty": .emptyBody])

        let result = makeClient().get(server.url(for: "/empty"))

        XCTAssertNil(result.error)
        XCTAssertEqual(result.statusCode, 200)
        XCTAssertEqual(result.headers["content-length"], "0")
        XCTAssertTrue(result.body.isEmpty)
    }

    func testMalformedJSONAnswers200WithJSONContentTypeButUnparseableBody() throws {
        let server = try makeServer(["/garbled": .malformedJSON])

        let result = makeClient().get(server.url(for: "/garbled"))

        XCTAssertEqual(result.statusCode, 200)
        XCTAssertEqual(result.headers["content-type"]?.hasPrefix("application/json"), true)
        XCTAssertFalse(result.body.isEmpty)
        XCTAssertThrowsError(try JSONSerialization.jsonObject(with: result.body))
    }

    func testDelayedResponseArrivesNoSoonerThanItsDelay() throws {
        let server = try makeServer(["/slow": FixtureResponse.json(Fixtures.user).delayed(by: .milliseconds(150))])
        let clock = ContinuousClock()
        let started = clock.now

        let result = makeClient().get(server.url(for: "/slow"))

        XCTAssertEqual(result.statusCode, 200)
        XCTAssertGreaterThanOrEqual(clock.now - started, .milliseconds(150))
    }

    func testSetRouteReplacesTheResponseForLaterRequests() throws {
        let server = try makeServer(["/user": .json(Fixtures.user)])
        let client = makeClient()
        XCTAssertEqual(client.get(server.url(for: "/user")).statusCode, 200)

        server.setRoute("/user", .status(503))

        XCTAssertEqual(client.get(server.url(for: "/user")).statusCode, 503)
    }

    // MARK: - Recording

    func testRoutingIgnoresQueryButRecordsFullTarget() throws {
        let server = try makeServer([Fixtures.questionsPath: .json(Fixtures.questionsPage)])

        let result = makeClient().get(server.url(for: Fixtures.questionsPath + "?site=stackoverflow&page=2"))

        XCTAssertEqual(result.statusCode, 200)
        let request = try XCTUnwrap(server.receivedRequests.first)
        XCTAssertEqual(request.method, "GET")
        XCTAssertEqual(request.target, "/2.3/questions?site=stackoverflow&page=2")
        XCTAssertEqual(request.path, Fixtures.questionsPath)
        XCTAssertEqual(request.query, "site=stackoverflow&page=2")
        XCTAssertEqual(request.description, "GET /2.3/questions?site=stackoverflow&page=2")
        XCTAssertEqual(server.requestCount(path: Fixtures.questionsPath + "?ignored"), 1)
    }

    func testConcurrentRequestsAreCountedExactlyPerPath() throws {
        let server = try makeServer(["/a": .json(Fixtures.user), "/b": .emptyBody])
        let client = makeClient()
        let statuses = LockedBox<[Int]>([])
        let finished = DispatchSemaphore(value: 0)
        let paths = Array(repeating: "/a", count: 5) + Array(repeating: "/b", count: 3)

        for path in paths {
            client.start(server.url(for: path)) { result in
                statuses.value.append(result.statusCode ?? -1)
                finished.signal()
            }
        }
        for _ in paths {
            XCTAssertEqual(finished.wait(timeout: .now() + .seconds(5)), .success)
        }

        XCTAssertEqual(statuses.value, Array(repeating: 200, count: 8))
        XCTAssertEqual(server.requestCount, 8)
        XCTAssertEqual(server.requestCount(path: "/a"), 5)
        XCTAssertEqual(server.requestCount(path: "/b"), 3)
        XCTAssertEqual(server.requestCount(path: "/c"), 0)
        XCTAssertEqual(server.receivedRequests.map(\.target).sorted(), paths.sorted())
        XCTAssertEqual(server.abandonedRequestCount, 0)
    }

    // MARK: - Gating

    func testHeldResponseKeepsClientWaitingUntilReleased() throws {
        let server = try makeServer([Fixtures.userPath: .json(Fixtures.user)])
        let outcome = LockedBox<HTTPResult?>(nil)
        let finished = DispatchSemaphore(value: 0)
        server.holdResponses()

        makeClient().start(server.url(for: Fixtures.userPath)) { result in
            outcome.value = result
            finished.signal()
        }

        XCTAssertTrue(server.waitForRequests(1, timeout: .seconds(5)))
        // A broken hold would answer within milliseconds; 200 ms of silence is the evidence it is held.
        XCTAssertEqual(finished.wait(timeout: .now() + .milliseconds(200)), .timedOut, "answered while held")

        server.releaseResponses()

        XCTAssertEqual(finished.wait(timeout: .now() + .seconds(5)), .success)
        XCTAssertEqual(outcome.value?.statusCode, 200)
        XCTAssertEqual(outcome.value?.body, Fixtures.user)
    }

    func testRequestsArrivingAfterReleaseAreNotHeld() throws {
        let server = try makeServer(["/a": .emptyBody])
        let client = makeClient()
        server.holdResponses()
        server.releaseResponses()

        XCTAssertEqual(client.get(server.url(for: "/a")).statusCode, 200)
    }

    func testWaitForRequestsReturnsTrueOnceCountHasArrived() throws {
        let server = try makeServer(["/a": .emptyBody])
        let client = makeClient()
        server.holdResponses()
        defer { server.releaseResponses() }

        for _ in 0..<3 {
            client.start(server.url(for: "/a")) { _ in }
        }

        XCTAssertTrue(server.waitForRequests(3, timeout: .seconds(5)))
        XCTAssertEqual(server.requestCount, 3)
    }

    func testWaitForRequestsReturnsFalseOnTimeoutWhenTooFewArrive() throws {
        let server = try makeServer(["/a": .emptyBody])
        XCTAssertEqual(makeClient().get(server.url(for: "/a")).statusCode, 200)
        let clock = ContinuousClock()
        let started = clock.now

        XCTAssertFalse(server.waitForRequests(2, timeout: .milliseconds(100)))

        XCTAssertGreaterThanOrEqual(clock.now - started, .milliseconds(100))
        XCTAssertEqual(server.requestCount, 1)
    }

    func testAsyncWaitsReportArrivalsAndTimeouts() async throws {
        let server = try makeServer(["/a": .emptyBody])
        let client = makeClient()
        server.holdResponses()
        defer { server.releaseResponses() }

        let tasks = (0..<2).map { _ in client.start(server.url(for: "/a")) { _ in } }

        let arrived = await server.waitForRequests(2, timeout: .seconds(5))
        XCTAssertTrue(arrived)
        let tooMany = await server.waitForRequests(3, timeout: .milliseconds(50))
        XCTAssertFalse(tooMany)
        tasks.forEach { $0.cancel() }
        let abandoned = await server.waitForAbandonedRequests(2, timeout: .seconds(5))
        XCTAssertTrue(abandoned)
    }

    // MARK: - Abandoned requests

    func testClientCancellingHeldRequestIsCountedAsAbandoned() throws {
        let server = try makeServer([Fixtures.questionsPath: .json(Fixtures.questionsPage)])
        let outcome = LockedBox<HTTPResult?>(nil)
        let finished = DispatchSemaphore(value: 0)
        server.holdResponses()

        let task = makeClient().start(server.url(for: Fixtures.questionsPath)) { result in
            outcome.value = result
            finished.signal()
        }
        XCTAssertTrue(server.waitForRequests(1, timeout: .seconds(5)))
        XCTAssertEqual(server.abandonedRequestCount, 0)

        task.cancel()

        XCTAssertTrue(server.waitForAbandonedRequests(1, timeout: .seconds(5)))
        XCTAssertEqual(finished.wait(timeout: .now() + .seconds(5)), .success)
        XCTAssertEqual(outcome.value?.urlErrorCode, .cancelled)
        server.releaseResponses()
        XCTAssertEqual(server.abandonedRequestCount, 1)
    }

    func testClientCancellingDelayedRequestIsCountedAsAbandoned() throws {
        let server = try makeServer(["/slow": FixtureResponse.emptyBody.delayed(by: .seconds(30))])

        let task = makeClient().start(server.url(for: "/slow")) { _ in }
        XCTAssertTrue(server.waitForRequests(1, timeout: .seconds(5)))
        task.cancel()

        XCTAssertTrue(server.waitForAbandonedRequests(1, timeout: .seconds(5)))
    }

    func testWaitForAbandonedRequestsReturnsFalseOnTimeout() throws {
        let server = try makeServer()

        XCTAssertFalse(server.waitForAbandonedRequests(1, timeout: .milliseconds(50)))
    }

    // MARK: - Raw HTTP handling

    func testRequestSplitAcrossSeveralReadsIsAnswered() throws {
        let server = try makeServer([Fixtures.userPath: .json(Fixtures.user)])
        let connection = try XCTUnwrap(RawHTTPConnection(port: server.port))

        XCTAssertTrue(connection.send("GET /users/42?x=1 HT"))
        XCTAssertTrue(connection.send("TP/1.1\r\nHost: 127.0.0.1\r"))
        // An incomplete head must not count as a request; waiting also lets the server read the pieces separately.
        XCTAssertFalse(server.waitForRequests(1, timeout: .milliseconds(50)))
        XCTAssertTrue(connection.send("\n\r\n"))
        let response = connection.readToEnd()

        XCTAssertTrue(response.hasPrefix("HTTP/1.1 200 OK\r\n"), response)
        XCTAssertTrue(response.contains("\r\nContent-Length: \(Fixtures.user.count)\r\n"), response)
        XCTAssertTrue(response.contains("\r\nConnection: close\r\n"), response)
        XCTAssertTrue(response.hasSuffix("\r\n\r\n" + Fixtures.userJSON), response)
        XCTAssertEqual(
            server.receivedRequests,
            [FixtureRequest(method: "GET", target: "/users/42?x=1", headers: ["host": "127.0.0.1"])])
    }

    func testRequestBodyIsReadAndIgnored() throws {
        let server = try makeServer(["/submit": .status(201)])
        let connection = try XCTUnwrap(RawHTTPConnection(port: server.port))

        XCTAssertTrue(connection.send("POST /submit HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello"))
        XCTAssertFalse(server.waitForRequests(1, timeout: .milliseconds(50)), "counted before the body was read")
        XCTAssertTrue(connection.send(" world"))
        let response = connection.readToEnd()

        XCTAssertTrue(response.hasPrefix("HTTP/1.1 201 Created\r\n"), response)
        XCTAssertEqual(server.receivedRequests.map(\.description), ["POST /submit"])
    }

    func testMalformedRequestLineAnswers400WithoutBeingCounted() throws {
        let server = try makeServer()
        let connection = try XCTUnwrap(RawHTTPConnection(port: server.port))

        XCTAssertTrue(connection.send("NONSENSE\r\n\r\n"))

        XCTAssertTrue(connection.readToEnd().hasPrefix("HTTP/1.1 400 Bad Request\r\n"))
        XCTAssertEqual(server.requestCount, 0)
    }

    // MARK: - Stopping

    func testStopReturnsPromptlyAndLaterConnectionsFail() throws {
        let server = try makeServer(["/a": .emptyBody])
        let client = makeClient()
        let heldOutcome = LockedBox<HTTPResult?>(nil)
        let heldFinished = DispatchSemaphore(value: 0)
        server.holdResponses()
        client.start(server.url(for: "/a")) { result in
            heldOutcome.value = result
            heldFinished.signal()
        }
        XCTAssertTrue(server.waitForRequests(1, timeout: .seconds(5)))
        let clock = ContinuousClock()
        let started = clock.now

        server.stop()

        XCTAssertLessThan(clock.now - started, .seconds(1))
        XCTAssertEqual(heldFinished.wait(timeout: .now() + .seconds(5)), .success)
        XCTAssertNotNil(heldOutcome.value?.error, "a held request must not be answered after stop")
        XCTAssertNil(RawHTTPConnection(port: server.port), "the port still accepts connections")
        XCTAssertNotNil(client.get(server.url(for: "/a")).error)
        XCTAssertFalse(server.waitForRequests(2, timeout: .seconds(5)), "waiting on a stopped server must not block")
        server.stop()  // A second stop is harmless.
    }

    func testReleasingTheLastReferenceStopsTheServer() throws {
        var server: FixtureHTTPServer? = try FixtureHTTPServer(routes: ["/a": .emptyBody])
        let port = try XCTUnwrap(server?.port)
        XCTAssertNotNil(RawHTTPConnection(port: port))

        server = nil

        XCTAssertNil(RawHTTPConnection(port: port))
    }

    #if os(Linux)
    func testStopLeavesNoServerThreadsRunning() throws {
        let server = try makeServer(["/a": .emptyBody])
        let client = makeClient()
        server.holdResponses()
        for _ in 0..<3 {
            client.start(server.url(for: "/a")) { _ in }
        }
        XCTAssertTrue(server.waitForRequests(3, timeout: .seconds(5)))
        let silentConnection = try XCTUnwrap(RawHTTPConnection(port: server.port))
        // The accept thread plus one per held request; the silent connection's thread may not have started yet.
        XCTAssertGreaterThanOrEqual(Self.threadNames(port: server.port).count, 4)

        server.stop()

        // stop() waits until every thread has finished its work; the OS thread itself ends a moment later, and
        // nothing notifies that, so this checks repeatedly for a bounded time.
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(2)
        while !Self.threadNames(port: server.port).isEmpty && clock.now < deadline {
            usleep(2_000)
        }
        XCTAssertEqual(Self.threadNames(port: server.port), [])
        withExtendedLifetime(silentConnection) {}
    }

    /// The names of the live threads of the server on `port`, read from `/proc`.
    private static func threadNames(port: UInt16) -> [String] {
        let taskDirectory = "/proc/self/task"
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: taskDirectory)) ?? []
        return tasks.compactMap { task in
            try? String(contentsOfFile: "\(taskDirectory)/\(task)/comm", encoding: .utf8)
        }
        .filter { $0.hasPrefix("fx\(port)-") }
    }
    #endif

    // MARK: - Fixtures

    func testFixturesHaveTheStackExchangeShapes() throws {
        let page = try XCTUnwrap(JSONSerialization.jsonObject(with: Fixtures.questionsPage) as? [String: Any])
        let items = try XCTUnwrap(page["items"] as? [[String: Any]])
        XCTAssertEqual(items.count, Fixtures.questionsPageItemCount)
        XCTAssertEqual(page["has_more"] as? Bool, true)
        XCTAssertEqual(page["quota_max"] as? Int, 300)
        XCTAssertEqual(page["quota_remaining"] as? Int, 297)
        for (index, item) in items.enumerated() {
            XCTAssertEqual(item["question_id"] as? Int, index + 1)
            XCTAssertNotNil(item["title"] as? String)
            XCTAssertEqual(item["link"] as? String, "https://stackoverflow.com/q/\(index + 1)")
            XCTAssertNotNil(item["score"] as? Int)
            XCTAssertNotNil(item["is_answered"] as? Bool)
            XCTAssertNotNil(item["tags"] as? [String])
        }

        let user = try XCTUnwrap(JSONSerialization.jsonObject(with: Fixtures.user) as? [String: Any])
        XCTAssertEqual(user["id"] as? Int, 42)
        XCTAssertEqual(user["name"] as? String, "Ada Lovelace")
        XCTAssertEqual(user["email"] as? String, "ada@example.com")
    }
}
