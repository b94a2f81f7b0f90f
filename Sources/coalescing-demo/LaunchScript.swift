import CoalescingOperations
import Examples
import FixtureHTTPServer
import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The app launch the demo plays: several screens ask for the same data at once.
final class LaunchScript: Sendable {
    private typealias Fixtures = FixtureHTTPServer.Fixtures

    private let options: DemoOptions
    private let timeline = Timeline()
    private let tally = Tally()
    /// The embedded server, unless `--base-url` points elsewhere.
    private let server: FixtureHTTPServer?
    private let baseURL: URL
    private let session: URLSession
    private let userService: UserService
    /// Where every caller is called back: a queue of our own, never `.main`, which a
    /// command-line program does not service.
    private let callbacks = OperationQueue()
    private let workQueue = OperationQueue()
    private let sharedManager: OperationQueueManager
    private let sharedPrefetcher = PrefetchableTaskCoalescer<Int, QuestionPage>(prefetchTimeout: .seconds(30))

    init(options: DemoOptions) throws {
        self.options = options
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        session = URLSession(configuration: configuration)
        callbacks.name = "demo callbacks"
        callbacks.maxConcurrentOperationCount = 1
        sharedManager = OperationQueueManager(queue: workQueue)

        let tally = self.tally
        if let baseURL = options.baseURL {
            server = nil
            self.baseURL = baseURL
            // A real API has no such user endpoint: serve the user in-process, as slowly as a network.
            userService = UserService { completion in
                tally.requestSent("user, in-process")
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(250)) {
                    completion(.success(User(id: 42, name: "Ada Lovelace", email: "ada@example.com")))
                }
            }
        } else {
            let server = try FixtureHTTPServer(routes: [
                Fixtures.userPath: .json(Fixtures.user).delayed(by: .milliseconds(250)),
                Fixtures.questionsPath: .json(Fixtures.questionsPage).delayed(by: .milliseconds(300)),
            ])
            self.server = server
            baseURL = server.baseURL
            let http = UserService.http(url: server.url(for: Fixtures.userPath), session: session)
            userService = UserService { completion in
                tally.requestSent("GET \(Fixtures.userPath)")
                http.load(completion)
            }
        }
    }

    /// Plays the launch and prints the timeline and the summary.
    func run() async {
        timeline.note(
            """
            coalescing-demo: an app launch against \(baseURL.absoluteString) \
            (\(server == nil ? "--base-url" : "embedded server")), coalescing \(options.coalescing ? "on" : "off")

                 time  caller                            what happened
            """)
        let everyoneServed = DispatchGroup()

        // The splash screen prefetches page 2 for the screen that follows it.
        let prefetch = Task {
            timeline.log("splash screen", "prefetches page 2")
            let result = await Result {
                try await sharedPrefetcher.prefetch(key: 2) { try await self.questions().questions(page: 2) }
            }
            served("splash screen", result.map { "page 2 is stored for the next screen" })
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
            try? await Task.sleep(for: .milliseconds(40))
        }
        fetchQuestions("pull to refresh", group: everyoneServed)

        await withCheckedContinuation { done in
            everyoneServed.notify(queue: .global()) { done.resume() }
        }
        await prefetch.value

        // The next screen needs page 2: the prefetch has it.
        await showNextScreen()

        printSummary()
        server?.stop()
        session.invalidateAndCancel()
    }

    // MARK: Callers

    /// One manager for everyone when coalescing; without, each caller gets a manager of its own.
    private func queueManager() -> OperationQueueManager {
        options.coalescing ? sharedManager : OperationQueueManager(queue: workQueue)
    }

    private func questions() -> QuestionsDataManager {
        let tally = self.tally
        return QuestionsDataManager(queueManager: queueManager(), session: session, baseURL: baseURL) { url in
            tally.requestSent("GET \(url.path)?\(url.query ?? "")")
        }
    }

    private func fetchUser(_ caller: String, group: DispatchGroup) {
        group.enter()
        let users = UserDataManager(queueManager: queueManager(), service: userService)
        let handle = users.fetchUser(callBackQueue: callbacks) { result in
            self.served(caller, result.map(\.name))
            group.leave()
        }
        timeline.log(caller, handle.admission == .joinedWork ? "joins the user fetch in flight" : "starts a user fetch")
    }

    private func fetchQuestions(_ caller: String, group: DispatchGroup) {
        group.enter()
        let handle = questions().fetchQuestions(callBackQueue: callbacks) { result in
            self.served(caller, result.map { "\($0.items.count) questions" })
            group.leave()
        }
        timeline.log(caller, handle.admission == .joinedWork ? "joins the request in flight" : "starts a request")
    }

    private func showNextScreen() async {
        let requestsBefore = tally.requestsSent.count
        timeline.log("next screen", "asks for page 2")
        // Without coalescing, nothing is shared: the next screen has its own prefetcher, empty.
        let prefetcher =
            options.coalescing ? sharedPrefetcher : PrefetchableTaskCoalescer(prefetchTimeout: .seconds(30))
        let result = await Result {
            try await prefetcher.deduplicated(key: 2) { try await self.questions().questions(page: 2) }
        }
        let source = tally.requestsSent.count == requestsBefore ? " (from the prefetch, no request)" : ""
        served("next screen", result.map { "\($0.items.count) questions\(source)" })
    }

    private func served(_ caller: String, _ result: Result<String, Error>) {
        tally.callerServed()
        switch result {
        case .success(let description): timeline.log(caller, "served: \(description)")
        case .failure(let error): timeline.log(caller, "failed: \(error)")
        }
    }

    // MARK: Summary

    private func printSummary() {
        let requests = tally.requestsSent
        let served = tally.callersServed
        var byRequest: [String: Int] = [:]
        requests.forEach { byRequest[$0, default: 0] += 1 }
        let lines = byRequest.sorted { $0.key < $1.key }.map { "      \($0.value) × \($0.key)" }
        let serverCount = server.map { "  (the server counted \($0.requestCount))" } ?? ""
        timeline.note(
            """

            Summary, coalescing \(options.coalescing ? "on" : "off")
              callers served   \(served)
              requests sent    \(requests.count)\(serverCount)
            \(lines.joined(separator: "\n"))
              requests saved   \(served - requests.count)
            \(options.coalescing ? "Run with --no-coalescing to compare." : "Run without --no-coalescing to compare.")
            """)
    }
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
