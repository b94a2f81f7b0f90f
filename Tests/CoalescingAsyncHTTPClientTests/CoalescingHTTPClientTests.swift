#if AsyncHTTPClient
import AsyncHTTPClient
import CoalescingAsyncHTTPClient
import CoalescingHTTP
import CoalescingOperations
import NIOCore
import NIOHTTP1
import TestSupport
import XCTest

// CoalescingHTTPClient against a real Hummingbird server on loopback, through a real HTTPClient,
// for what the contract both clients keep (HTTPContract, run in ContractTests.swift) leaves to
// each: the key of an AsyncHTTPClient request (Guarantee 40), a transport error (42), the request's
// cancellation and progress as it arrives (43), and every caller hearing exactly once when callers
// arrive as requests end (2).
final class CoalescingHTTPClientTests: ServerTestCase {
    private func request(_ route: String, method: HTTPMethod = .GET, headers: [(String, String)] = [])
        -> HTTPClientRequest
    {
        var request = HTTPClientRequest(url: server.url + route)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        return request
    }

    private func text(_ response: CoalescedHTTPResponse) -> String { String(buffer: response.body) }

    /// Guarantee 42: a transport error (here the connection closed mid-body) reaches every caller
    /// as the client threw it.
    func testATransportErrorReachesEveryCaller() async throws {
        let http = CoalescingHTTPClient(client: client)
        let request = request("/drop")
        let tasks = (0..<3).map { _ in Task { try await http.execute(request) } }
        await waitUntil("two callers joined") { http.statistics.callersJoined == 2 }
        server.hold.open()
        var errors: [String] = []
        for task in tasks {
            do {
                _ = try await task.value
                XCTFail("a body cut short must fail")
            } catch {
                XCTAssertNil(error as? HTTPCoalescingError)
                XCTAssertNil(error as? CoalescingError)
                errors.append(String(describing: error))
            }
        }
        XCTAssertEqual(Set(errors).count, 1, "one error, every caller's: \(errors)")
        XCTAssertEqual(server.requests("/drop"), 1)
    }

    /// Guarantee 43: a cancelled caller withdraws alone; when the last caller leaves, the request
    /// is cancelled, though the server never answered.
    func testCancellationWithdrawsOneCallerAndTheLastCancelsTheRequest() async throws {
        let http = CoalescingHTTPClient(client: client)
        let request = request("/hold")
        let first = Task { try await http.execute(request) }
        let second = Task { try await http.execute(request) }
        await waitUntil("the request is sent and joined") {
            server.requests("/hold") == 1 && http.statistics.callersJoined == 1
        }
        second.cancel()
        await XCTAssertThrowsCancellation(try await second.value)
        XCTAssertEqual(http.statistics.workInFlight, 1, "the request goes on for the other caller")
        first.cancel()
        await XCTAssertThrowsCancellation(try await first.value)
        await waitUntil("the request was cancelled") { http.statistics.workCancelled == 1 }
        XCTAssertEqual(server.requests("/hold"), 1)
    }

    /// Guarantee 43: a request started with `whenAbandoned: .runToCompletion` goes on when its
    /// only caller leaves, and ends with its response.
    func testARequestThatRunsToCompletionOutlivesItsCallers() async throws {
        let http = CoalescingHTTPClient(client: client)
        let request = request("/hold", method: .POST)
        let caller = Task { try await http.execute(request, whenAbandoned: .runToCompletion) }
        await waitUntil("the request is sent") { server.requests("/hold") == 1 }
        caller.cancel()
        await XCTAssertThrowsCancellation(try await caller.value)
        XCTAssertEqual(http.statistics.workInFlight, 1, "the request goes on with no caller")
        server.hold.open()
        await waitUntil("the request ended with its response") { http.statistics.workSucceeded == 1 }
    }

    /// Guarantee 43: every caller that asks for progress receives the transfer's, a caller that
    /// joins late the latest at once.
    func testProgressReachesEveryCallerThatAsks() async throws {
        let http = CoalescingHTTPClient(client: client)
        let request = request("/slow")
        let seen = [LockedBox<[WorkProgress]>([]), LockedBox<[WorkProgress]>([])]
        let first = Task { [seen] in
            try await http.execute(request) { progress in seen[0].mutate { $0.append(progress) } }
        }
        await waitUntil("the first half reached the first caller") { seen[0].value.last?.completed == 1000 }
        let second = Task { [seen] in
            try await http.execute(request) { progress in seen[1].mutate { $0.append(progress) } }
        }
        await waitUntil("the second caller joined and heard the latest") { seen[1].value.last?.completed == 1000 }
        let silent = Task { try await http.execute(request) }
        await waitUntil("a third caller joined") { http.statistics.callersJoined == 2 }
        server.secondHalf.open()
        for task in [first, second, silent] {
            let response = try await task.value
            XCTAssertEqual(response.body.readableBytes, 2000)
        }
        for progress in seen {
            XCTAssertEqual(progress.value.last, WorkProgress(completed: 2000, total: 2000))
            XCTAssertTrue(progress.value.allSatisfy { $0.total == 2000 }, "\(progress.value)")
        }
        XCTAssertEqual(server.requests("/slow"), 1)
    }

    /// Guarantee 2, in the race of Moya #2215 and golang/go#31420: callers arrive while the
    /// previous request finishes and is removed; every caller hears exactly once, none hangs, and
    /// each request the coalescer started is one the server received.
    ///
    /// Eight callers loop on one URL, so that each arrives while another's request ends; besides,
    /// a caller that sees the whole body arrive (the request about to end) sends in one more
    /// caller, and so does every request's end, seen by the observer just after its removal.
    func testCallersArrivingAsRequestsEndEachHearExactlyOnce() async throws {
        let (workers, rounds, extras) = (8, 40, 200)
        let heard = LockedBox<[String: Int]>([:])
        let late = LockedBox<[Task<Void, any Error>]>([])
        let box = LockedBox<CoalescingHTTPClient?>(nil)
        let request = request("/fast")
        // One caller, named `name`, that counts what it hears; at the end of the body it may send
        // in another.
        @Sendable func call(_ name: String) async throws {
            let http = box.value!
            let response = try await http.execute(request, timeout: .seconds(30)) { progress in
                if progress.total > 0 && progress.completed == progress.total { sendLate("body \(name)") }
            }
            XCTAssertTrue(String(buffer: response.body).hasPrefix("fast "))
            heard.mutate { $0[name, default: 0] += 1 }
        }
        @Sendable func sendLate(_ name: String) {
            late.mutate { tasks in
                guard tasks.count < extras else { return }
                let number = tasks.count
                tasks.append(Task { try await call("late \(number) after \(name)") })
            }
        }
        let http = CoalescingHTTPClient(client: client) { event in
            if case .workEnded(_, let work, _, _, _, _) = event { sendLate("end of \(work)") }
        }
        box.value = http
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<workers {
                group.addTask { for round in 0..<rounds { try await call("worker \(worker) round \(round)") } }
            }
            try await group.waitForAll()
        }
        await waitUntil("every late caller was sent in") { late.value.count == extras }
        for task in late.value { try await task.value }

        let callers = workers * rounds + extras
        XCTAssertEqual(heard.value.count, callers)
        XCTAssertTrue(heard.value.values.allSatisfy { $0 == 1 }, "every caller heard exactly once")
        let statistics = http.statistics
        XCTAssertEqual(statistics.callersArrived, callers)
        XCTAssertEqual(statistics.callersServed, callers)
        XCTAssertEqual(statistics.callersTimedOut, 0)
        XCTAssertEqual(statistics.workInFlight, 0)
        XCTAssertEqual(statistics.workStarted, server.requests("/fast"))
    }

    /// Guarantees 40 and 41: the key reads an AsyncHTTPClient request as CoalescingURLSession's
    /// reads a URLRequest: trace headers left out, `Authorization` in, and a body, which it cannot
    /// read, kept to its caller, sharing key or not.
    func testTheKeyReadsARequestAsTheSessionsDoes() throws {
        let http = CoalescingHTTPClient(client: client)
        let plain = request("/hold")
        let traced = request("/hold", headers: [("traceparent", "00-1-2-01")])
        let authorized = request("/hold", headers: [("Authorization", "Bearer a")])
        XCTAssertEqual(try http.key(for: plain), try http.key(for: traced))
        XCTAssertNotEqual(try http.key(for: plain), try http.key(for: authorized))
        XCTAssertEqual(try http.key(for: authorized).description, "GET \(server.url)/hold [authorization]")
        var posted = request("/hold", method: .POST)
        posted.body = .bytes(ByteBuffer(string: "{}"))
        XCTAssertFalse(try http.key(for: posted).shares)
        XCTAssertFalse(try http.key(for: posted, sharing: .key("k")).shares)
    }
}
#endif
