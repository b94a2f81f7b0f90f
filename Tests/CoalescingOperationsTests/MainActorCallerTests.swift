import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// A view model calling the manager's main-actor form,
/// `enqueue(identifier:priority:timeout:makeOperation:onMainActor:)`: Guarantee 3 (the handler
/// runs isolated to the main actor, so it sets the view model's state as plain code), 1 (callers
/// that join get the one result of one run), and 5 and 11 (a caller that withdraws hears
/// `CancellationError`, once). See the Guarantees article.
///
/// The work finishes on a thread of the dispatch pool, so a handler that ran where the work
/// finished would be off the main thread. The tests run on the main actor and wait with
/// `fulfillment(of:timeout:)`, which leaves the main actor free to run the handlers meanwhile.
final class MainActorCallerTests: XCTestCase {
    @MainActor func testTheHandlerRunsOnTheMainActorAndSetsTheViewModelsState() async {
        let release = Gate()
        let viewModel = ProfileViewModel(manager: OperationQueueManager()) {
            TestOperation(work: heldWork(release: release) { Profile(name: "Ada", run: 1) })
        }
        let loaded = expectation(description: "the view model heard back")
        viewModel.onChange = { loaded.fulfill() }

        XCTAssertEqual(viewModel.load(), .startedWork)
        release.open()
        await fulfillment(of: [loaded], timeout: 10)

        XCTAssertEqual(viewModel.profile, Profile(name: "Ada", run: 1))
        XCTAssertEqual(viewModel.deliveredOnMainThread, [true], "one call, on the main thread")
    }

    @MainActor func testViewModelsThatJoinTheWorkInFlightAllGetItsOneResult() async {
        let manager = OperationQueueManager()
        let release = Gate()
        let started = Gate()
        let starts = Counter()
        let makeFetch: @Sendable () -> CoalescibleOperation<Profile> = {
            TestOperation(
                starts: starts,
                work: heldWork(release: release, started: started) { Profile(name: "Ada", run: starts.current) })
        }
        let viewModels = ["tab bar", "profile header", "notification badge"].map { _ in
            ProfileViewModel(manager: manager, makeFetch: makeFetch)
        }
        var loaded: [XCTestExpectation] = []
        for (index, viewModel) in viewModels.enumerated() {
            let heard = expectation(description: "view model \(index) heard back")
            viewModel.onChange = { heard.fulfill() }
            loaded.append(heard)
        }

        let admissions = viewModels.map { $0.load() }
        XCTAssertTrue(started.wait())
        release.open()
        await fulfillment(of: loaded, timeout: 10)

        XCTAssertEqual(admissions, [.startedWork, .joinedWork, .joinedWork])
        XCTAssertEqual(starts.current, 1, "the work ran once")
        for viewModel in viewModels {
            XCTAssertEqual(viewModel.profile, Profile(name: "Ada", run: 1))
            XCTAssertEqual(viewModel.deliveredOnMainThread, [true])
        }
        XCTAssertEqual(manager.statistics.callersServed, 3)
    }

    @MainActor func testAViewModelThatWithdrawsHearsCancellationErrorOnceAndTheOthersGetTheResult() async {
        let manager = OperationQueueManager()
        let release = Gate()
        let started = Gate()
        let makeFetch: @Sendable () -> CoalescibleOperation<Profile> = {
            TestOperation(work: heldWork(release: release, started: started) { Profile(name: "Ada", run: 1) })
        }
        // The one that leaves arrives first: were its handler served the result as well, that call
        // would reach the main actor before the staying caller's.
        let leaving = ProfileViewModel(manager: manager, makeFetch: makeFetch)
        let staying = ProfileViewModel(manager: manager, makeFetch: makeFetch)
        let left = expectation(description: "the leaving view model heard back")
        leaving.onChange = { left.fulfill() }
        let loaded = expectation(description: "the staying view model heard back")
        staying.onChange = { loaded.fulfill() }
        XCTAssertEqual(leaving.load(), .startedWork)
        XCTAssertEqual(staying.load(), .joinedWork)
        XCTAssertTrue(started.wait())

        leaving.cancelLoading()
        await fulfillment(of: [left], timeout: 10)
        XCTAssertTrue(
            leaving.failure is CancellationError, "the caller withdrew itself: \(String(describing: leaving.failure))")
        XCTAssertNil(leaving.profile)

        release.open()
        await fulfillment(of: [loaded], timeout: 10)
        XCTAssertEqual(staying.profile, Profile(name: "Ada", run: 1))
        XCTAssertEqual(leaving.deliveredOnMainThread, [true], "the leaving view model heard once")
        XCTAssertEqual(staying.deliveredOnMainThread, [true])
        let statistics = manager.statistics
        XCTAssertEqual(statistics.callersWithdrawn, 1)
        XCTAssertEqual(statistics.callersServed, 1)
    }
}

/// Guarantees 24 and 27 for a main-actor caller: its progress runs on the main actor, before its
/// result, and a flood of updates while the main actor is busy leaves one value waiting for it.
final class MainActorProgressTests: XCTestCase {
    @MainActor func testAFloodOfUpdatesReachesABusyMainActorAsItsLatestValueThenTheResult() async {
        let manager = OperationQueueManager()
        let reported = Gate()
        let updates = 10_000
        var heard: [String] = []
        let done = expectation(description: "the result reached the main actor")
        manager.enqueue(
            identifier: "download",
            makeOperation: {
                TestOperation<Int> { operation in
                    DispatchQueue.global().async {
                        for completed in 1...updates {
                            operation.report(progress: WorkProgress(completed: Int64(completed), total: Int64(updates)))
                        }
                        operation.finish(result: .success(1))
                        reported.open()
                    }
                }
            },
            progress: { progress in
                if #available(macOS 14, iOS 17, tvOS 17, watchOS 10, *) {
                    MainActor.assertIsolated("progress ran off the main actor")
                }
                heard.append("\(progress)")
            },
            onMainActor: { result in
                heard.append("result \((try? result.get()) ?? -1)")
                done.fulfill()
            })
        // Keeps the main actor busy while the work reports everything and finishes.
        XCTAssertTrue(reported.wait())
        await fulfillment(of: [done], timeout: 10)

        XCTAssertEqual(heard, ["\(updates) of \(updates)", "result 1"])
    }
}

/// A profile as a screen shows it; `run` tells which run of the work produced it.
private struct Profile: Sendable, Equatable {
    let name: String
    let run: Int
}

/// A view model as an app writes one: state on the main actor, set by the manager's main-actor
/// handler as plain code, with no hop and no unchecked escape.
@MainActor private final class ProfileViewModel {
    var profile: Profile?
    private(set) var failure: (any Error)?
    /// Whether each call of the handler ran on the main thread.
    private(set) var deliveredOnMainThread: [Bool] = []
    /// Called after each change, for the test to wait on.
    var onChange: (@MainActor () -> Void)?

    private let manager: OperationQueueManager
    private let makeFetch: @Sendable () -> CoalescibleOperation<Profile>
    private var loading: CoalescingHandle<Profile>?

    init(manager: OperationQueueManager, makeFetch: @escaping @Sendable () -> CoalescibleOperation<Profile>) {
        self.manager = manager
        self.makeFetch = makeFetch
    }

    /// Loads the profile, joining a load in flight; returns what the manager did with this caller.
    func load() -> CoalescingHandle<Profile>.Admission {
        // `onMainActor:` spelled out: an unlabeled trailing closure would be the `@Sendable`
        // `completionHandler:` of the plain form, which may not touch the view model's state.
        let handle = manager.enqueue(
            identifier: "profile", makeOperation: makeFetch,
            onMainActor: { result in
                if #available(macOS 14, iOS 17, tvOS 17, watchOS 10, *) {
                    MainActor.assertIsolated("the main-actor handler ran off the main actor")
                }
                self.deliveredOnMainThread.append(Thread.isMainThread)
                switch result {
                case .success(let profile): self.profile = profile
                case .failure(let error): self.failure = error
                }
                self.onChange?()
            })
        loading = handle
        return handle.admission
    }

    /// Stops waiting for the load: this view model only.
    func cancelLoading() {
        loading?.withdraw()
    }
}
