import CoalescingHTTP
import CoalescingOperations
import Foundation
import HTTPStub
import TestSupport
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A coalescing URLSession against the in-process stub, for what the contract both clients keep
/// (HTTPContract, run in ContractTests.swift) leaves to each: the race of Guarantee 37 (and 2,
/// Moya #2215 and golang/go#31420), priority (38), a transport error (42) and the data task's
/// cancellation (43).
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

    // MARK: Guarantee 37: every caller hears once (Moya #2215, golang/go#31420)

    /// Guarantees 37 and 2: callers arriving while the response lands and the request leaves the
    /// coalescer, some of them cancelled at random, either join it or send anew; every one hears
    /// exactly once, none is left waiting, and the figures add up. Seeded: a failure prints the
    /// seed, and `COALESCING_HTTP_STRESS_SEED=<seed>` replays its plan.
    func testCallersArrivingAsTheResponseLandsAllHearOnce() async throws {
        let stub = self.stub!
        let http = makeSession()
        let seed = stressSeed()
        var random = SplitMix64(seed: seed)
        var (served, withdrawn) = (0, 0)
        for round in 0..<500 {
            let plan = (0..<Int.random(in: 1...12, using: &random)).map { _ in
                Int.random(in: 0..<5, using: &random) == 0
            }
            let heard = await callers(plan, through: http, "seed \(seed), round \(round)") { _ in
                makeRequest(stub, "/me")
            }
            served += heard.served
            withdrawn += heard.withdrawn
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

    /// Guarantees 36 and 2: many different requests of one session in flight at once, some of
    /// their callers cancelled, each get their own response or withdraw, while the session adds and
    /// removes tasks around every answer. The stub used to answer from threads of its own, racing
    /// FoundationNetworking's unlocked table of the session's tasks, and this test crashed in it
    /// every time. It answers on each task's own queue, as a real transfer does. Seeded as above.
    func testManyRequestsOfOneSessionAnsweredAndCancelledAtOnceEachHearOnce() async throws {
        let stub = self.stub!
        let http = makeSession()
        let seed = stressSeed()
        var random = SplitMix64(seed: seed)
        var served = 0
        for round in 0..<200 {
            let plan = (0..<32).map { _ in Int.random(in: 0..<4, using: &random) == 0 }
            served += await callers(plan, through: http, "seed \(seed), round \(round)") { index in
                makeRequest(stub, "/me?round=\(round)&caller=\(index)")
            }.served
        }
        let statistics = http.statistics
        XCTAssertEqual(statistics.callersWaiting, 0, "seed \(seed)")
        XCTAssertEqual(statistics.callersServed, served, "seed \(seed)")
        XCTAssertEqual(statistics.workSucceeded, served, "every request its own; seed \(seed)")
        XCTAssertEqual(
            statistics.callersArrived, statistics.callersServed + statistics.callersWithdrawn, "seed \(seed)")
        XCTAssertGreaterThan(served, 200 * 32 / 2, "seed \(seed)")
    }

    private func stressSeed() -> UInt64 {
        ProcessInfo.processInfo.environment["COALESCING_HTTP_STRESS_SEED"].flatMap { UInt64($0) }
            ?? UInt64.random(in: 0...UInt64.max)
    }

    /// Starts a caller per entry of `plan`, of `request(itsIndex)`, cancels those whose entry is
    /// true, and counts how each ended: served (`200`), or withdrawn.
    private func callers(
        _ plan: [Bool], through http: CoalescingURLSession, _ context: String, file: StaticString = #filePath,
        line: UInt = #line, request: @escaping @Sendable (Int) -> URLRequest
    ) async -> (served: Int, withdrawn: Int) {
        let callers = plan.indices.map { index in Task { statusCode(try await http.data(for: request(index)).1) } }
        for (caller, cancels) in zip(callers, plan) where cancels { caller.cancel() }
        var (served, withdrawn) = (0, 0)
        for caller in callers {
            do {
                let status = try await caller.value
                XCTAssertEqual(status, 200, context, file: file, line: line)
                served += 1
            } catch is CancellationError {
                withdrawn += 1
            } catch {
                XCTFail("\(context): \(error); replay with COALESCING_HTTP_STRESS_SEED", file: file, line: line)
            }
        }
        return (served, withdrawn)
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

    // MARK: Guarantee 42: errors and bad input

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

    // MARK: Guarantee 43: controls per caller

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
