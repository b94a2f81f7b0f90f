import CoalescingHTTP
import CoalescingOperations
import Foundation
import HTTPStub
import TestSupport
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One operation subclass per endpoint, on an `OperationQueueManager`: Guarantee 39, with the
/// key, the errors and the controls of Guarantees 38, 40, 42 and 43.
final class HTTPRequestOperationTests: XCTestCase {
    /// An endpoint, as an app writes one: the signed-in user's name.
    private final class NameRequest: HTTPRequestOperation<String>, @unchecked Sendable {
        init(
            _ stub: HTTPStub, http: CoalescingURLSession, token: String = "a", path: String = "/me",
            completionHandler: (@Sendable (Result<String, Error>) -> Void)? = nil
        ) throws {
            var request = URLRequest(url: stub.url(for: path))
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            try super.init(request: request, session: http, completionHandler: completionHandler) { data, response in
                guard (response as? HTTPURLResponse)?.statusCode == 200 else { throw URLError(.badServerResponse) }
                return try JSONDecoder().decode([String: String].self, from: data)["name"] ?? ""
            }
        }
    }

    private var stub: HTTPStub!
    private var http: CoalescingURLSession!
    private var manager: OperationQueueManager!

    override func setUp() {
        stub = HTTPStub(routes: [
            "/me": .json(#"{"name":"Ada"}"#), "/missing": .status(404),
            "/parts": StubResponse(body: Data(#"{"name":"Grace"}"#.utf8)).inParts(4),
        ])
        let configuration = URLSessionConfiguration.ephemeral
        stub.configure(configuration)
        http = CoalescingURLSession(configuration: configuration)
        manager = OperationQueueManager()
    }

    /// Guarantee 39: identical endpoint operations send one request, and every caller gets the
    /// decoded value.
    func testIdenticalOperationsSendOneRequestAndEveryCallerGetsTheValue() throws {
        let recorder = ResultRecorder<String>()
        stub.holdResponses()
        for caller in ["tab bar", "header", "badge"] {
            manager.enqueue(operation: try NameRequest(stub, http: http, completionHandler: recorder.handler(caller)))
        }
        XCTAssertTrue(stub.waitForRequests(1, timeout: .seconds(10)))
        stub.releaseResponses()
        XCTAssertTrue(recorder.waitForCalls(3))
        for caller in ["tab bar", "header", "badge"] {
            XCTAssertEqual(try XCTUnwrap(recorder.onlyResult(of: caller)).get(), "Ada")
        }
        XCTAssertEqual(stub.requestCount(path: "/me"), 1)
    }

    /// Guarantee 40: operations for two users never share, as their keys differ in
    /// `Authorization`.
    func testOperationsForTwoUsersSendTwoRequests() async throws {
        stub.holdResponses()
        let (stub, http, manager) = (self.stub!, self.http!, self.manager!)
        let first = Task { try await manager.value(of: try NameRequest(stub, http: http, token: "a")) }
        let second = Task { try await manager.value(of: try NameRequest(stub, http: http, token: "b")) }
        let arrived = await stub.waitForRequests(2, timeout: .seconds(10))
        XCTAssertTrue(arrived)
        stub.releaseResponses()
        _ = try await (first.value, second.value)
        XCTAssertEqual(stub.requestCount(path: "/me"), 2)
    }

    /// Guarantee 42: a request that cannot be sent is refused when the operation is made.
    func testAnInvalidRequestIsRefusedWhenTheOperationIsMade() {
        XCTAssertThrowsError(
            try HTTPRequestOperation<Data>(request: URLRequest(url: URL(string: "ftp://x.invalid/f")!), session: http) {
                data, _ in data
            }
        ) { error in
            guard case HTTPCoalescingError.invalidRequest = error else { return XCTFail("\(error)") }
        }
        XCTAssertEqual(stub.requestCount, 0)
    }

    /// Guarantee 42: the status reaches the operation's decode as it came; what decode throws
    /// reaches every caller.
    func testWhatDecodeThrowsReachesEveryCaller() throws {
        let recorder = ResultRecorder<String>()
        stub.holdResponses()
        for caller in ["one", "two"] {
            manager.enqueue(
                operation: try NameRequest(
                    stub, http: http, path: "/missing", completionHandler: recorder.handler(caller)))
        }
        XCTAssertTrue(stub.waitForRequests(1, timeout: .seconds(10)))
        stub.releaseResponses()
        XCTAssertTrue(recorder.waitForCalls(2))
        for caller in ["one", "two"] {
            XCTAssertThrowsError(try XCTUnwrap(recorder.onlyResult(of: caller)).get()) {
                XCTAssertEqual(($0 as? URLError)?.code, .badServerResponse)
            }
        }
    }

    /// Guarantee 38: the data task runs at the operation's priority when it starts.
    func testTheDataTaskRunsAtTheOperationsPriority() throws {
        let recorder = ResultRecorder<String>()
        let operation = try NameRequest(stub, http: http, completionHandler: recorder.handler("user"))
        operation.qualityOfService = .userInitiated
        manager.enqueue(operation: operation)
        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(stub.receivedTasks.first?.priority, URLSessionTask.highPriority)
    }

    /// Guarantee 43: cancelling the operation cancels its data task; every caller hears
    /// `CoalescingError.cancelled`.
    func testCancellingTheOperationCancelsItsDataTask() throws {
        let recorder = ResultRecorder<String>()
        stub.holdResponses()
        let operation = try NameRequest(stub, http: http, completionHandler: recorder.handler("user"))
        manager.enqueue(operation: operation)
        XCTAssertTrue(stub.waitForRequests(1, timeout: .seconds(10)))
        operation.cancel()
        XCTAssertTrue(stub.waitForAbandonedRequests(1, timeout: .seconds(10)))
        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertThrowsError(try XCTUnwrap(recorder.onlyResult(of: "user")).get()) {
            XCTAssertEqual($0 as? CoalescingError, .cancelled)
        }
    }

    /// Guarantee 43: the operation's caller receives the transfer's progress.
    func testTheCallerReceivesTheTransfersProgress() throws {
        let recorder = ResultRecorder<String>()
        let seen = LockedBox<[WorkProgress]>([])
        manager.enqueue(
            operation: try NameRequest(stub, http: http, path: "/parts", completionHandler: recorder.handler("user")),
            progress: { progress in seen.mutate { $0.append(progress) } })
        XCTAssertTrue(recorder.waitForCalls(1))
        XCTAssertEqual(try XCTUnwrap(recorder.onlyResult(of: "user")).get(), "Grace")
        XCTAssertEqual(seen.value.last, WorkProgress(completed: 16, total: 16), "\(seen.value)")
    }
}
