import CoalescingOperations
import Examples
import Foundation
import HTTPStub
import TestSupport
import XCTest

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The networking example against an HTTPStub, which counts every request the session sends:
/// Guarantees 1 (identical requests reach the server once), 2 and 3 (each caller hears once, on
/// its queue), 5 (withdrawing; the last caller out cancels the data task), 7 (a request after the
/// finish is sent again) and 11 (async callers) (see the
/// Guarantees article), through a real `URLSession`.
final class QuestionsDataManagerTests: XCTestCase {
    private typealias Fixtures = HTTPStub.Fixtures

    private var stub: HTTPStub!
    private var session: URLSession!
    private var questions: QuestionsDataManager!
    private var queueManager: OperationQueueManager!
    private let callbacks = OperationQueue()

    override func setUpWithError() throws {
        stub = HTTPStub(routes: [Fixtures.questionsPath: .json(Fixtures.questionsPage)])
        session = makeSession(reaching: stub)
        queueManager = OperationQueueManager()
        questions = QuestionsDataManager(queueManager: queueManager, session: session, baseURL: stub.baseURL)
    }

    override func tearDown() {
        // Held requests fail, then the session ends once its tasks have: cancelling a task as it
        // completes traps FoundationNetworking (see the demo's LaunchScript).
        stub.stop()
        session.finishTasksAndInvalidate()
    }

    func testFiveConcurrentFetchesSendOneRequest() {
        let results = ResultRecorder<QuestionPage>()
        stub.holdResponses()

        let admissions = (0..<5).map { _ in
            questions.fetchQuestions(callBackQueue: callbacks, completionHandler: results.append).admission
        }
        XCTAssertTrue(stub.waitForRequests(1, timeout: .seconds(10)))
        stub.releaseResponses()

        XCTAssertTrue(results.waitForCalls(5))
        XCTAssertEqual(admissions, [.startedWork] + Array(repeating: .joinedWork, count: 4))
        XCTAssertEqual(stub.requestCount(path: Fixtures.questionsPath), 1)
        XCTAssertEqual(results.values.count, 5)
        XCTAssertEqual(results.values.first?.items.count, Fixtures.questionsPageItemCount)
        XCTAssertEqual(results.values.first?.hasMore, true)
        XCTAssertEqual(results.values.first?.items.first?.id, 1)
        XCTAssertTrue(results.values.allSatisfy { $0 == results.values.first }, "every caller got the same page")
    }

    func testAFetchAfterTheFirstCompletedSendsASecondRequest() {
        let results = ResultRecorder<QuestionPage>()

        questions.fetchQuestions(callBackQueue: callbacks, completionHandler: results.append)
        XCTAssertTrue(results.waitForCalls(1))
        questions.fetchQuestions(callBackQueue: callbacks, completionHandler: results.append)
        XCTAssertTrue(results.waitForCalls(1))

        XCTAssertEqual(stub.requestCount(path: Fixtures.questionsPath), 2)
        XCTAssertEqual(results.values.count, 2)
    }

    func testDifferentPagesAreDifferentRequests() {
        let results = ResultRecorder<QuestionPage>()
        stub.holdResponses()

        questions.fetchQuestions(page: 1, callBackQueue: callbacks, completionHandler: results.append)
        questions.fetchQuestions(page: 2, callBackQueue: callbacks, completionHandler: results.append)
        XCTAssertTrue(stub.waitForRequests(2, timeout: .seconds(10)))
        stub.releaseResponses()

        XCTAssertTrue(results.waitForCalls(2))
        XCTAssertEqual(Set(stub.receivedRequests.compactMap(\.query)).count, 2)
    }

    func testErrorResponsesBecomeNetworkingErrors() {
        let cases: [(StubResponse, NetworkingError)] = [
            (.status(404), .invalidStatusCode(404)),
            (.status(500), .invalidStatusCode(500)),
            (.emptyBody, .missingData),
            (.malformedJSON, .serialization),
            (.json(#"{"has_more":false}"#), .unexpectedJSON("the top level has no key 'items'")),
        ]
        for (response, expected) in cases {
            stub.setRoute(Fixtures.questionsPath, response)
            let results = ResultRecorder<QuestionPage>()

            questions.fetchQuestions(callBackQueue: callbacks, completionHandler: results.append)

            XCTAssertTrue(results.waitForCalls(1))
            XCTAssertEqual(results.errors.first as? NetworkingError, expected, "for \(response.statusCode)")
        }
    }

    func testAValueOfTheWrongTypeIsNamedByItsPath() {
        stub.setRoute(Fixtures.questionsPath, .json(#"{"items":[{"question_id":"one"}],"has_more":false}"#))
        let results = ResultRecorder<QuestionPage>()

        questions.fetchQuestions(callBackQueue: callbacks, completionHandler: results.append)

        XCTAssertTrue(results.waitForCalls(1))
        guard case .unexpectedJSON(let problem) = results.errors.first as? NetworkingError else {
            return XCTFail("expected unexpectedJSON, got \(results.errors)")
        }
        XCTAssertTrue(problem.hasPrefix("items[0].question_id is not Int"), problem)
    }

    func testAnUnreachableServerFailsWithTheTransportError() {
        let results = ResultRecorder<QuestionPage>()
        stub.stop()

        questions.fetchQuestions(callBackQueue: callbacks, completionHandler: results.append)

        XCTAssertTrue(results.waitForCalls(1))
        XCTAssertTrue(results.errors.first is URLError, "got \(results.results)")
    }

    func testWhenEveryCallerWithdrawsTheDataTaskIsCancelled() {
        let results = ResultRecorder<QuestionPage>()
        stub.holdResponses()
        let handles = (0..<3).map { _ in
            questions.fetchQuestions(callBackQueue: callbacks, completionHandler: results.append)
        }
        XCTAssertTrue(stub.waitForRequests(1, timeout: .seconds(10)))

        handles.forEach { $0.withdraw() }

        XCTAssertTrue(results.waitForCalls(3))
        XCTAssertEqual(results.errors.count, 3)
        XCTAssertTrue(results.errors.allSatisfy { $0 is CancellationError }, "each caller withdrew: \(results.errors)")
        XCTAssertTrue(stub.waitForAbandonedRequests(1, timeout: .seconds(10)), "the client hung up")
    }

    func testOneCallerWithdrawingLeavesTheRequestForTheOthers() {
        let results = ResultRecorder<QuestionPage>()
        stub.holdResponses()
        let handles = (0..<3).map { _ in
            questions.fetchQuestions(callBackQueue: callbacks, completionHandler: results.append)
        }
        XCTAssertTrue(stub.waitForRequests(1, timeout: .seconds(10)))

        handles[0].withdraw()
        XCTAssertTrue(results.waitForCalls(1))
        stub.releaseResponses()

        XCTAssertTrue(results.waitForCalls(2))
        XCTAssertEqual(results.values.count, 2)
        XCTAssertEqual(results.errors.count, 1)
        XCTAssertTrue(results.errors.first is CancellationError, "the caller withdrew: \(results.errors)")
        XCTAssertEqual(stub.abandonedRequestCount, 0)
    }

    func testConcurrentAsyncCallersSendOneRequest() async throws {
        stub.holdResponses()
        let questions = self.questions!
        let callers = (0..<5).map { _ in Task { try await questions.questions() } }
        let arrived = await stub.waitForRequests(1, timeout: .seconds(10))
        XCTAssertTrue(arrived)
        // Every caller has joined once the manager shows them waiting; the request is held meanwhile.
        await waitForCallers(5)
        stub.releaseResponses()

        var pages: [QuestionPage] = []
        for caller in callers {
            pages.append(try await caller.value)
        }
        XCTAssertEqual(pages.count, 5)
        XCTAssertEqual(stub.requestCount(path: Fixtures.questionsPath), 1)
    }

    /// Waits until `count` callers wait for the first page.
    private func waitForCallers(_ count: Int) async {
        let manager = queueManager!
        await waitUntil("\(count) callers wait") { manager.statistics.callersWaiting >= count }
        XCTAssertEqual(manager.statistics.callersWaiting, count)
    }
}
