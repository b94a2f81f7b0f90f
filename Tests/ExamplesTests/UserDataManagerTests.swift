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

/// The user-fetch example: three parts of the app asking at launch cost one fetch. Guarantees 1,
/// 2, 3 and 11 (see the Guarantees article), through the example's own `UserFetchOperation`.
final class UserDataManagerTests: XCTestCase {
    private let ada = User(id: 42, name: "Ada Lovelace", email: "ada@example.com")
    private let callbacks = OperationQueue()

    /// A service that counts its loads and answers each once `release` is signalled.
    private func heldService(loads: Counter, release: DispatchSemaphore, user: User) -> UserService {
        UserService { completion in
            loads.increment()
            DispatchQueue.global().async {
                release.wait()
                completion(.success(user))
            }
        }
    }

    func testThreeCallersAtLaunchShareOneFetch() {
        let loads = Counter()
        let release = DispatchSemaphore(value: 0)
        let users = UserDataManager(
            queueManager: OperationQueueManager(), service: heldService(loads: loads, release: release, user: ada))
        let results = ResultRecorder<User>()

        let admissions = ["tab bar", "profile header", "notification badge"].map { _ in
            users.fetchUser(callBackQueue: callbacks, completionHandler: results.append).admission
        }
        release.signal()

        XCTAssertTrue(results.waitForCalls(3))
        XCTAssertEqual(admissions, [.startedWork, .joinedWork, .joinedWork])
        XCTAssertEqual(results.values, [ada, ada, ada])
        XCTAssertEqual(loads.current, 1)
    }

    func testTheSeedStyleOperationCoalescesWithTheDataManagersCallers() {
        let loads = Counter()
        let release = DispatchSemaphore(value: 0)
        let service = heldService(loads: loads, release: release, user: ada)
        let manager = OperationQueueManager()
        let users = UserDataManager(queueManager: manager, service: service)
        let results = ResultRecorder<User>()

        users.fetchUser(callBackQueue: callbacks, completionHandler: results.append)
        let joined = manager.enqueue(
            operation: UserFetchOperation(service: service, callBackQueue: callbacks, completionHandler: results.append)
        )
        release.signal()

        XCTAssertTrue(results.waitForCalls(2))
        XCTAssertEqual(joined.admission, .joinedWork)
        XCTAssertEqual(loads.current, 1)
    }

    func testAsyncCallersShareOneFetch() async throws {
        let loads = Counter()
        let release = DispatchSemaphore(value: 0)
        let manager = OperationQueueManager()
        let users = UserDataManager(
            queueManager: manager, service: heldService(loads: loads, release: release, user: ada))

        let callers = (0..<3).map { _ in Task { try await users.user() } }
        await waitUntil("three callers wait") { manager.statistics.callersWaiting == 3 }
        release.signal()

        for caller in callers {
            let user = try await caller.value
            XCTAssertEqual(user, ada)
        }
        XCTAssertEqual(loads.current, 1)
    }

    func testThroughURLSessionThreeConcurrentFetchesSendOneRequest() throws {
        let stub = HTTPStub(routes: [HTTPStub.Fixtures.userPath: .json(HTTPStub.Fixtures.user)])
        let session = makeSession(reaching: stub)
        defer { session.finishTasksAndInvalidate() }  // never a cancel: see the demo's LaunchScript
        let users = UserDataManager(
            queueManager: OperationQueueManager(),
            service: .http(url: stub.url(for: HTTPStub.Fixtures.userPath), session: session))
        let results = ResultRecorder<User>()
        stub.holdResponses()

        for _ in 0..<3 {
            users.fetchUser(callBackQueue: callbacks, completionHandler: results.append)
        }
        XCTAssertTrue(stub.waitForRequests(1, timeout: .seconds(10)))
        stub.releaseResponses()

        XCTAssertTrue(results.waitForCalls(3))
        XCTAssertEqual(results.values, [ada, ada, ada])
        XCTAssertEqual(stub.requestCount, 1)
    }
}
