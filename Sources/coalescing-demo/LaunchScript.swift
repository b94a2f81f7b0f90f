import CoalescingHTTP
import CoalescingOperations
import Examples
import Foundation
import HTTPStub

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The app launch the demo plays: several screens ask for the same data at once.
final class LaunchScript: Sendable {
    private typealias Fixtures = HTTPStub.Fixtures

    /// The time between the question list's callers: a request that answers faster than this is
    /// over before the next caller asks, and nothing is left to join.
    static let callerSpacing: Duration = .milliseconds(40)

    private let coalescing: Bool
    private let latency: Duration
    private let timeline: Timeline
    private let tally = Tally()
    private let coalescers: Coalescers
    /// The embedded server, in-process, which counts every request the sessions send; none
    /// when `--base-url` points at a real one.
    private let server: HTTPStub?
    private let baseURL: URL
    /// The user request as the failure lines name it.
    private let userRequest: String
    /// The user fetch's session.
    private let session: URLSession
    /// The question requests' session: `CoalescingHTTP`'s, on the same configuration.
    private let http: CoalescingURLSession
    private let userService: UserService
    /// Where every caller is called back: a queue of our own, never `.main`, which a
    /// command-line program does not service while it waits.
    private let callbacks = OperationQueue()
    private let workQueue = OperationQueue()
    private let sharedManager: OperationQueueManager
    private let sharedPrefetcher = PrefetchableTaskCoalescer<Int, QuestionPage>(prefetchTimeout: .seconds(30))

    /// Creates the launch; with `quiet`, it prints no timeline. `routes` replaces the embedded
    /// server's answers for their paths (a test's 404 or bad JSON).
    init(options: DemoOptions, coalescing: Bool, quiet: Bool = false, routes: [String: StubResponse] = [:]) {
        self.coalescing = coalescing
        coalescers = Coalescers(printsEvents: options.printsEvents && !quiet)
        latency = options.latency
        timeline = Timeline(quiet: quiet)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.timeoutIntervalForRequest = 30
        if let baseURL = options.baseURL {
            server = nil
            self.baseURL = baseURL
        } else {
            let server = HTTPStub(
                routes: [
                    Fixtures.userPath: .json(Fixtures.user).delayed(by: options.latency),
                    Fixtures.questionsPath: .json(Fixtures.questionsPage).delayed(by: options.latency),
                ].merging(routes) { $1 })
            server.configure(configuration)
            self.server = server
            baseURL = server.baseURL
        }
        session = URLSession(configuration: configuration)
        http = CoalescingURLSession(configuration: configuration)
        callbacks.name = "demo callbacks"
        callbacks.maxConcurrentOperationCount = 1
        sharedManager = coalescers.makeManager(queue: workQueue)

        let tally = self.tally
        let latency = options.latency
        if let server {
            let userURL = server.url(for: Fixtures.userPath)
            userRequest = "GET \(userURL.absoluteString)"
            let http = UserService.http(url: userURL, session: session)
            userService = UserService { completion in
                tally.requestSent("GET \(Fixtures.userPath)")
                http.load(completion)
            }
        } else {
            userRequest = "user (served in-process)"
            // A real API has no such user endpoint: serve the user in-process, as slowly as a network.
            userService = UserService { completion in
                tally.requestSent("user, in-process")
                DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(latency / .nanoseconds(1)))) {
                    completion(.success(User(id: 42, name: "Ada Lovelace", email: "ada@example.com")))
                }
            }
        }
    }

    /// Plays the launch, prints its timeline, and returns its figures.
    func run() async -> LaunchSummary {
        let where_ =
            server == nil
            ? "\(baseURL.absoluteString) (--base-url; the user is served in-process after \(milliseconds(latency)))"
            : "the embedded server (in-process, at \(baseURL.absoluteString)), which answers every request after "
                + milliseconds(latency)
        timeline.note(
            """
            coalescing-demo: an app launch against \(where_); coalescing \(coalescing ? "on" : "off")

                 time  caller                            what happened
            """)
        let everyoneServed = DispatchGroup()

        // The splash screen prefetches page 2 for the screen that follows it.
        let prefetch = Task {
            timeline.log("splash screen", "prefetches page 2")
            let result = await Result {
                try await sharedPrefetcher.prefetch(key: 2) { try await self.questions(page: 2) }
            }
            served("splash screen", request: questionsRequest(page: 2), result.map { _ in "page 2 is stored" })
        }

        // Three parts of the app fetch the user at once.
        for caller in ["tab bar", "profile header", "notification badge"] {
            fetchUser(caller, group: everyoneServed)
        }

        // The question list asks four times while its request is in flight, then the user pulls
        // to refresh during that same request.
        for caller in [
            "question list", "question list (scrolled)", "question list (tab re-selected)", "question list (rotated)",
        ] {
            fetchQuestions(caller, group: everyoneServed)
            try? await Task.sleep(for: Self.callerSpacing)
        }
        fetchQuestions("pull to refresh", group: everyoneServed)

        await withCheckedContinuation { done in
            everyoneServed.notify(queue: .global()) { done.resume() }
        }
        await prefetch.value

        // The next screen needs page 2: the prefetch has it.
        await showNextScreen()

        await coalescers.eventsDelivered()
        let summary = LaunchSummary(
            coalescing: coalescing, coalescers: coalescers, tally: tally, serverRequestCount: server?.requestCount,
            wallTime: timeline.elapsed)
        server?.stop()
        // Every caller was served, so there is nothing to cancel, and cancelling would be unsafe:
        // swift-corelibs-foundation calls a task's completion handler before the task leaves its
        // session, and a cancel landing in between traps the process ("Trying to access a
        // behaviour for a task that in not in the registry", swiftlang/swift-corelibs-foundation
        // #3292; seen once in the demo's tests under ThreadSanitizer).
        session.finishTasksAndInvalidate()
        return summary
    }

    // MARK: Callers

    /// One manager for everyone when coalescing; without, each caller gets a manager of its own.
    private func queueManager() -> OperationQueueManager {
        coalescing ? sharedManager : coalescers.makeManager(queue: workQueue)
    }

    /// A request for a page of questions through `CoalescingHTTP`; without coalescing, one that
    /// shares with no other (and each caller has its manager besides).
    private func questionsOperation(
        page: Int, completionHandler: (@Sendable (Result<QuestionPage, Error>) -> Void)? = nil
    ) -> QuestionsRequest {
        let url = QuestionsRequest.url(page: page, baseURL: baseURL)
        let tally = self.tally
        let operation = QuestionsRequest(
            url: url, http: http, sharing: coalescing ? .automatic : .never,
            onSend: { tally.requestSent("GET \(url.path)?\(url.query ?? "")") },
            callBackQueue: completionHandler == nil ? nil : callbacks,
            completionHandler: completionHandler)
        coalescers.name(operation.identifier, operation.key.description)
        return operation
    }

    /// A page of questions, for a caller that awaits it.
    private func questions(page: Int) async throws -> QuestionPage {
        try await queueManager().value(of: questionsOperation(page: page))
    }

    private func questionsRequest(page: Int) -> String {
        "GET \(QuestionsRequest.url(page: page, baseURL: baseURL).absoluteString)"
    }

    private func fetchUser(_ caller: String, group: DispatchGroup) {
        group.enter()
        let users = UserDataManager(queueManager: queueManager(), service: userService)
        let asked = ContinuousClock.now
        let handle = users.fetchUser(callBackQueue: callbacks) { result in
            self.served(caller, request: self.userRequest, result.map(\.name), after: ContinuousClock.now - asked)
            group.leave()
        }
        let started = handle.admission != .joinedWork
        if started { tally.startedWork(caller) }
        timeline.log(caller, started ? "starts a user fetch" : "joins the user fetch in flight")
    }

    private func fetchQuestions(_ caller: String, group: DispatchGroup) {
        group.enter()
        let asked = ContinuousClock.now
        let operation = questionsOperation(page: 1) { result in
            let description = result.map { questionCount($0.items.count) }
            self.served(
                caller, request: self.questionsRequest(page: 1), description, after: ContinuousClock.now - asked)
            group.leave()
        }
        let handle = queueManager().enqueue(operation: operation)
        let started = handle.admission != .joinedWork
        if started { tally.startedWork(caller) }
        timeline.log(caller, started ? "starts a request" : "joins the request in flight")
    }

    private func showNextScreen() async {
        let caller = "next screen"
        timeline.log(caller, "asks for page 2")
        // Without coalescing, nothing is shared: the next screen has its own prefetcher, empty.
        let prefetcher = coalescing ? sharedPrefetcher : PrefetchableTaskCoalescer(prefetchTimeout: .seconds(30))
        let tally = self.tally
        let result = await Result {
            try await prefetcher.value(key: 2) {
                tally.startedWork(caller)
                return try await self.questions(page: 2)
            }
        }
        let fromPrefetch = !tally.hasStartedWork(caller)
        if fromPrefetch, case .success = result {
            tally.servedFromPrefetch(caller)
        }
        let source = fromPrefetch ? " (from the prefetch, no request)" : ""
        served(caller, request: questionsRequest(page: 2), result.map { questionCount($0.items.count) + source })
    }

    private func served(
        _ caller: String, request: String, _ result: Result<String, Error>, after elapsed: Duration? = nil
    ) {
        let outcome = CallerOutcome(result)
        tally.record(caller, request: request, outcome, after: elapsed)
        switch (result, outcome) {
        case (.success(let description), _): timeline.log(caller, "served: \(description)")
        case (_, .failed(let reason, _)): timeline.log(caller, "failed: \(reason)")
        default: timeline.log(caller, "cancelled")
        }
    }
}

/// `1 question`, `4 questions`.
private func questionCount(_ count: Int) -> String {
    count == 1 ? "1 question" : "\(count) questions"
}

extension Result where Failure == Error {
    /// Captures the outcome of async work.
    fileprivate init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
