import CoalescingHTTP
import CoalescingOperations
import Foundation
import HTTPStub
import TestSupport
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A coalescing URLSession against the in-process stub: Guarantees 36 to 43 (and 2, for the race
/// Moya #2215 and golang/go#31420 describe).
final class CoalescingURLSessionTests: XCTestCase {
    private var stub: HTTPStub!

    override func setUp() {
        stub = HTTPStub(routes: [
            "/me": .json(#"{"name":"Ada"}"#),
            "/missing": .status(404),
            "/broken": .status(500),
            "/large": StubResponse(body: Data(repeating: 7, count: 1_000)),
            "/large-stated": StubResponse(body: Data(repeating: 7, count: 1_000)).inParts(1),
            "/parts": StubResponse(body: Data(repeating: 1, count: 300)).inParts(3),
            "/orders": .json(#"{"id":1}"#),
        ])
    }

    private func makeSession(
        keying: HTTPKeying = .standard, maximumBodySize: Int = CoalescingURLSession.defaultMaximumBodySize,
        observer: (@Sendable (CoalescingEvent<HTTPRequestKey>) -> Void)? = nil, clock: ManualClock? = nil
    ) -> CoalescingURLSession {
        let configuration = URLSessionConfiguration.ephemeral
        stub.configure(configuration)
        if let clock {
            return CoalescingURLSession(
                configuration: configuration, keying: keying, maximumBodySize: maximumBodySize, observer: observer,
                clock: clock)
        }
        return CoalescingURLSession(
            configuration: configuration, keying: keying, maximumBodySize: maximumBodySize, observer: observer)
    }

    /// Starts `count` callers of `request` while the stub holds its answers; returns once all wait.
    private func heldCallers(_ count: Int, _ request: URLRequest, through http: CoalescingURLSession) async
        -> [Task<(Data, URLResponse), Error>]
    {
        stub.holdResponses()
        let callers = (0..<count).map { _ in Task { try await http.data(for: request) } }
        await waitUntil("\(count) callers wait") { http.statistics.callersWaiting == count }
        return callers
    }

    private func expectRequests(_ count: Int, file: StaticString = #filePath, line: UInt = #line) async {
        let arrived = await stub.waitForRequests(count, timeout: .seconds(10))
        XCTAssertTrue(arrived, "\(count) requests did not arrive", file: file, line: line)
    }

    // MARK: Guarantee 36: one request, every caller its response

    /// Guarantee 36: a hundred identical GETs in flight send one request, and every caller gets
    /// the response and the whole body.
    func testAHundredConcurrentIdenticalGetsSendOneRequest() async throws {
        let stub = self.stub!
        let http = makeSession()
        let callers = await heldCallers(100, makeRequest(stub, "/me"), through: http)
        stub.releaseResponses()
        for caller in callers {
            let (data, response) = try await caller.value
            XCTAssertEqual(String(decoding: data, as: UTF8.self), #"{"name":"Ada"}"#)
            XCTAssertEqual(statusCode(response), 200)
        }
        XCTAssertEqual(stub.requestCount(path: "/me"), 1)
        XCTAssertEqual(http.statistics.workStarted, 1)
        XCTAssertEqual(http.statistics.callersJoined, 99)
    }

    /// Guarantee 36: coalescing is not caching; a request after the last one ended is sent anew.
    func testARequestAfterTheLastOneEndedIsSentAnew() async throws {
        let stub = self.stub!
        let http = makeSession()
        _ = try await http.data(for: makeRequest(stub, "/me"))
        _ = try await http.data(for: makeRequest(stub, "/me"))
        XCTAssertEqual(stub.requestCount(path: "/me"), 2)
    }

    /// Guarantee 36: after a forget, the next identical request is sent anew, while the callers
    /// already waiting keep the first.
    func testForgetLetsTheNextIdenticalRequestBeSentAnew() async throws {
        let stub = self.stub!
        let http = makeSession()
        stub.holdResponses()
        let first = Task { try await http.data(for: makeRequest(stub, "/me")) }
        await expectRequests(1)
        XCTAssertTrue(http.forget(makeRequest(stub, "/me")))
        let second = Task { try await http.data(for: makeRequest(stub, "/me")) }
        await expectRequests(2)
        stub.releaseResponses()
        _ = try await first.value
        _ = try await second.value
        XCTAssertEqual(stub.requestCount(path: "/me"), 2)
    }

    // MARK: Guarantee 37: every caller hears once (Moya #2215, golang/go#31420)

    /// Guarantees 37 and 2: callers arriving while the response lands and the request leaves the
    /// coalescer, some of them cancelled at random, either join it or send anew; every one hears
    /// exactly once, none is left waiting, and the figures add up. Seeded: a failure prints the
    /// seed, and `COALESCING_HTTP_STRESS_SEED=<seed>` replays its plan.
    func testCallersArrivingAsTheResponseLandsAllHearOnce() async throws {
        let stub = self.stub!
        let http = makeSession()
        let seed =
            ProcessInfo.processInfo.environment["COALESCING_HTTP_STRESS_SEED"].flatMap { UInt64($0) }
            ?? UInt64.random(in: 0...UInt64.max)
        var random = SplitMix64(seed: seed)
        var (served, withdrawn) = (0, 0)
        for round in 0..<500 {
            let plan = (0..<Int.random(in: 1...12, using: &random)).map { _ in
                Int.random(in: 0..<5, using: &random) == 0
            }
            let callers = plan.map { _ in Task { statusCode(try await http.data(for: makeRequest(stub, "/me")).1) } }
            for (caller, cancels) in zip(callers, plan) where cancels { caller.cancel() }
            for caller in callers {
                do {
                    let status = try await caller.value
                    XCTAssertEqual(status, 200, "seed \(seed), round \(round)")
                    served += 1
                } catch is CancellationError {
                    withdrawn += 1
                } catch {
                    XCTFail("seed \(seed), round \(round): \(error); replay with COALESCING_HTTP_STRESS_SEED=\(seed)")
                }
            }
        }
        let statistics = http.statistics
        XCTAssertEqual(statistics.callersWaiting, 0, "seed \(seed)")
        XCTAssertEqual(statistics.callersServed, served, "seed \(seed)")
        XCTAssertEqual(
            statistics.callersArrived, statistics.callersServed + statistics.callersWithdrawn, "seed \(seed)")
        XCTAssertLessThanOrEqual(statistics.callersWithdrawn, withdrawn, "seed \(seed)")
        // Work abandoned before its data task was sent sends nothing; every success is one request.
        XCTAssertLessThanOrEqual(stub.requestCount(path: "/me"), statistics.workStarted, "seed \(seed)")
        XCTAssertLessThanOrEqual(statistics.workSucceeded, stub.requestCount(path: "/me"), "seed \(seed)")
    }

    // MARK: Guarantee 38: priority

    /// Guarantee 38: the data task runs at its most urgent caller's priority, mapped to
    /// `URLSessionTask.priority`.
    func testTheDataTaskRisesToTheMostUrgentCallersPriority() async throws {
        let stub = self.stub!
        let http = makeSession()
        stub.holdResponses()
        let low = Task(priority: .low) { try await http.data(for: makeRequest(stub, "/me")) }
        await expectRequests(1)
        XCTAssertEqual(stub.receivedTasks.first?.priority, URLSessionTask.lowPriority)
        let high = Task(priority: .high) { try await http.data(for: makeRequest(stub, "/me")) }
        await waitUntil("the data task rose") { stub.receivedTasks.first?.priority == URLSessionTask.highPriority }
        stub.releaseResponses()
        _ = try await low.value
        _ = try await high.value
    }

    // MARK: Guarantee 40: the key

    /// Guarantee 40: requests that differ only in `Authorization`, or in `Accept-Language`, are
    /// two requests, and each caller gets its own response.
    func testTwinsThatDifferInAuthorizationOrAcceptLanguageSendTwoRequests() async throws {
        let stub = self.stub!
        let http = makeSession()
        for name in ["Authorization", "Accept-Language"] {
            stub.holdResponses()
            let before = stub.requestCount(path: "/me")
            let twins = ["a", "b"].flatMap { value in
                (0..<3).map { _ in Task { try await http.data(for: makeRequest(stub, "/me", headers: [name: value])) } }
            }
            await waitUntil("six callers wait") { http.statistics.callersWaiting == 6 }
            stub.releaseResponses()
            for twin in twins { _ = try await twin.value }
            XCTAssertEqual(stub.requestCount(path: "/me") - before, 2, name)
        }
    }

    /// Guarantee 40: the observer's keys name the header fields of a request, not their values.
    func testEventsDescribeRequestsWithoutHeaderValues() async throws {
        let stub = self.stub!
        let log = LockedBox<[String]>([])
        let http = makeSession(observer: { event in log.mutate { $0.append("\(event)") } })
        _ = try await http.data(for: makeRequest(stub, "/me", headers: ["Authorization": "Bearer secret-token"]))
        await waitUntil("the work's end was reported") { log.value.contains { $0.hasPrefix("workEnded") } }
        XCTAssertTrue(log.value.allSatisfy { !$0.contains("secret-token") }, "\(log.value)")
        XCTAssertTrue(log.value[0].contains("[authorization]"), log.value[0])
    }

    // MARK: Guarantee 41: only safe methods share by default

    /// Guarantee 41: a POST is sent once for every caller; with a sharing key, once for all.
    func testAPostIsSentOncePerCallerUnlessASharingKeyOptsItIn() async throws {
        let stub = self.stub!
        let http = makeSession()
        stub.holdResponses()
        let posts = (0..<3).map { _ in Task { try await http.data(for: makeRequest(stub, "/orders", method: "POST")) } }
        await expectRequests(3)
        stub.releaseResponses()
        for post in posts { _ = try await post.value }
        XCTAssertEqual(stub.requestCount(path: "/orders"), 3)

        stub.holdResponses()
        let keyed = (0..<3).map { _ in
            Task { try await http.data(for: makeRequest(stub, "/orders", method: "POST"), sharing: .key("order-17")) }
        }
        await waitUntil("three callers wait") { http.statistics.callersWaiting == 3 }
        stub.releaseResponses()
        for post in keyed { _ = try await post.value }
        XCTAssertEqual(stub.requestCount(path: "/orders"), 4)
        XCTAssertEqual(stub.receivedMethods, ["POST", "POST", "POST", "POST"])
    }

    // MARK: Guarantee 42: errors and bad input

    /// Guarantee 42: a response's status is the response, handed to every caller as it came.
    func testAnErrorStatusIsTheResponseForEveryCaller() async throws {
        let stub = self.stub!
        let http = makeSession()
        for (path, code) in [("/missing", 404), ("/broken", 500)] {
            let callers = await heldCallers(3, makeRequest(stub, path), through: http)
            stub.releaseResponses()
            for caller in callers {
                let response = try await caller.value.1
                XCTAssertEqual(statusCode(response), code)
            }
            XCTAssertEqual(stub.requestCount(path: path), 1)
        }
    }

    /// Guarantee 42: a transport error reaches every caller as the session reported it.
    func testATransportErrorReachesEveryCaller() async throws {
        let stub = self.stub!
        let http = makeSession()
        let callers = await heldCallers(3, makeRequest(stub, "/me"), through: http)
        await expectRequests(1)
        stub.stop()
        for caller in callers {
            do {
                _ = try await caller.value
                XCTFail("expected the connection's loss")
            } catch {
                XCTAssertEqual((error as? URLError)?.code, .networkConnectionLost, "\(error)")
            }
        }
    }

    /// Guarantee 42: a body over the limit fails every caller with `bodyTooLarge`, whether its
    /// length was stated or not.
    func testABodyOverTheLimitFailsEveryCaller() async throws {
        let stub = self.stub!
        let http = makeSession(maximumBodySize: 100)
        for path in ["/large", "/large-stated"] {
            let callers = await heldCallers(3, makeRequest(stub, path), through: http)
            stub.releaseResponses()
            for caller in callers {
                do {
                    _ = try await caller.value
                    XCTFail("expected bodyTooLarge")
                } catch {
                    XCTAssertEqual(
                        error as? HTTPCoalescingError,
                        .bodyTooLarge(url: stub.url(for: path).absoluteString, limit: 100))
                }
            }
        }
        let small = try await http.data(for: makeRequest(stub, "/me")).0
        XCTAssertEqual(small.count, 14)
    }

    /// Guarantee 42: a request that cannot be sent fails at once, and starts nothing.
    func testAnInvalidRequestFailsAtOnceAndSendsNothing() async throws {
        let stub = self.stub!
        let http = makeSession()
        for url in ["ftp://example.com/file", "data:text/plain,hello", "http:///path"] {
            do {
                _ = try await http.data(for: URLRequest(url: URL(string: url)!))
                XCTFail("expected invalidRequest for \(url)")
            } catch {
                guard case HTTPCoalescingError.invalidRequest = error else { return XCTFail("\(url): \(error)") }
            }
        }
        XCTAssertEqual(http.statistics.workStarted, 0)
        XCTAssertEqual(stub.requestCount, 0)
    }

    // MARK: Guarantee 43: controls per caller

    /// Guarantee 43: a cancelled caller withdraws alone; the request goes on for the others.
    func testCancellingOneCallerWithdrawsOnlyThatCaller() async throws {
        let stub = self.stub!
        let http = makeSession()
        stub.holdResponses()
        let leaving = Task { try await http.data(for: makeRequest(stub, "/me")) }
        let staying = Task { try await http.data(for: makeRequest(stub, "/me")) }
        await waitUntil("two callers wait") { http.statistics.callersWaiting == 2 }
        leaving.cancel()
        await XCTAssertThrowsCancellation(try await leaving.value)
        stub.releaseResponses()
        let response = try await staying.value.1
        XCTAssertEqual(statusCode(response), 200)
        XCTAssertEqual(stub.abandonedRequestCount, 0)
    }

    /// Guarantee 43: when the last caller leaves, the data task is cancelled; under
    /// `.runToCompletion` it runs to its end.
    func testTheDataTaskIsCancelledWhenTheLastCallerLeavesUnlessItRunsToCompletion() async throws {
        let stub = self.stub!
        let http = makeSession()
        stub.holdResponses()
        let only = Task { try await http.data(for: makeRequest(stub, "/me")) }
        await expectRequests(1)
        only.cancel()
        await XCTAssertThrowsCancellation(try await only.value)
        XCTAssertTrue(stub.waitForAbandonedRequests(1, timeout: .seconds(10)))

        let kept = Task { try await http.data(for: makeRequest(stub, "/me"), whenAbandoned: .runToCompletion) }
        await expectRequests(2)
        kept.cancel()
        await XCTAssertThrowsCancellation(try await kept.value)
        stub.releaseResponses()
        await waitUntil("the kept request ended") { http.statistics.workEnded == 2 }
        XCTAssertEqual(stub.abandonedRequestCount, 1)
        XCTAssertEqual(http.statistics.workSucceeded, 1)
    }

    /// Guarantee 43: `cancel(_:sharing:)` stops the request for every caller, and its data task.
    func testCancelStopsTheRequestForEveryCaller() async throws {
        let stub = self.stub!
        let http = makeSession()
        let callers = await heldCallers(3, makeRequest(stub, "/me"), through: http)
        await expectRequests(1)
        XCTAssertTrue(http.cancel(makeRequest(stub, "/me")))
        for caller in callers { await XCTAssertThrowsCoalescingError(.cancelled, try await caller.value) }
        XCTAssertTrue(stub.waitForAbandonedRequests(1, timeout: .seconds(10)))
        XCTAssertFalse(http.cancel(makeRequest(stub, "/me")))
    }

    /// Guarantee 43: a caller's deadline ends that caller's wait only.
    func testADeadlineEndsOneCallersWaitOnly() async throws {
        let stub = self.stub!
        let clock = ManualClock()
        let http = makeSession(clock: clock)
        stub.holdResponses()
        let hurried = Task { try await http.data(for: makeRequest(stub, "/me"), timeout: .seconds(1)) }
        let patient = Task { try await http.data(for: makeRequest(stub, "/me")) }
        await waitUntil("two callers wait") { http.statistics.callersWaiting == 2 }
        await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        await XCTAssertThrowsCoalescingError(.timedOut, try await hurried.value)
        stub.releaseResponses()
        let response = try await patient.value.1
        XCTAssertEqual(statusCode(response), 200)
        XCTAssertEqual(http.statistics.callersTimedOut, 1)
    }

    /// Guarantee 43: every caller that asks for progress receives the transfer's, to its end,
    /// before its response.
    func testEveryCallerThatAsksReceivesTheTransfersProgress() async throws {
        let stub = self.stub!
        let http = makeSession()
        let (first, second) = (LockedBox<[WorkProgress]>([]), LockedBox<[WorkProgress]>([]))
        stub.holdResponses()
        let callers = [first, second].map { seen in
            Task {
                try await http.data(for: makeRequest(stub, "/parts"), progress: { p in seen.mutate { $0.append(p) } })
            }
        }
        await waitUntil("two callers wait") { http.statistics.callersWaiting == 2 }
        stub.releaseResponses()
        for caller in callers {
            let body = try await caller.value.0
            XCTAssertEqual(body.count, 300)
        }
        for seen in [first.value, second.value] {
            XCTAssertEqual(seen.last, WorkProgress(completed: 300, total: 300), "\(seen)")
        }
    }
}

private func makeRequest(_ stub: HTTPStub, _ path: String, method: String = "GET", headers: [String: String] = [:])
    -> URLRequest
{
    var request = URLRequest(url: stub.url(for: path))
    request.httpMethod = method
    for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
    return request
}

private func statusCode(_ response: URLResponse) -> Int { (response as? HTTPURLResponse)?.statusCode ?? -1 }
