import CoalescingOperations
import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The app's entry point for questions: the boundary the rest of the app talks to, with no
/// operations, queues or coalescing in sight.
public final class QuestionsDataManager: Sendable {
    private let queueManager: OperationQueueManager
    private let session: URLSession
    private let baseURL: URL
    private let onRequest: @Sendable (URL) -> Void

    /// Creates a data manager.
    ///
    /// - Parameters:
    ///   - queueManager: The manager shared by every part of the app that should coalesce.
    ///   - session: The session for the data tasks.
    ///   - baseURL: The API's root, such as `https://api.stackexchange.com`.
    ///   - onRequest: Called each time a request is actually sent, for logging or metrics.
    public init(
        queueManager: OperationQueueManager,
        session: URLSession = .shared,
        baseURL: URL,
        onRequest: @escaping @Sendable (URL) -> Void = { _ in }
    ) {
        self.queueManager = queueManager
        self.session = session
        self.baseURL = baseURL
        self.onRequest = onRequest
    }

    /// The URL of one page of questions on `site`, newest activity first.
    ///
    /// - Parameters:
    ///   - page: The page number, from 1.
    ///   - site: The Stack Exchange site.
    /// - Returns: The page's URL; identical pages have identical URLs, so their fetches coalesce.
    public func url(page: Int = 1, site: String = "stackoverflow") -> URL {
        var components = URLComponents(url: baseURL, resolvingAgainstBaseURL: false)!
        components.path = components.path.trimmingSuffix("/") + "/2.3/questions"
        components.queryItems = [
            URLQueryItem(name: "page", value: String(page)),
            URLQueryItem(name: "order", value: "desc"),
            URLQueryItem(name: "sort", value: "activity"),
            URLQueryItem(name: "site", value: site),
        ]
        return components.url!
    }

    /// Fetches a page of questions, joining an identical fetch already in flight.
    ///
    /// - Parameters:
    ///   - page: The page number, from 1.
    ///   - callBackQueue: Where `completionHandler` runs; nil, the default, runs it on the thread
    ///     that finishes the fetch.
    ///   - completionHandler: Called once with the page; a `URLError`; a ``NetworkingError``; or
    ///     a `CoalescingError` or `CancellationError`.
    /// - Returns: A handle that withdraws this caller only; when every caller has withdrawn, the
    ///   data task is cancelled.
    @discardableResult
    public func fetchQuestions(
        page: Int = 1,
        callBackQueue: OperationQueue? = nil,
        completionHandler: @escaping @Sendable (Result<QuestionPage, Error>) -> Void
    ) -> CoalescingHandle<QuestionPage> {
        let url = url(page: page)
        return queueManager.enqueue(
            identifier: url.absoluteString, callBackQueue: callBackQueue,
            makeOperation: { QuestionsFetchOperation(url: url, session: session, onRequest: onRequest) },
            completionHandler: completionHandler)
    }

    /// Fetches a page of questions, joining an identical fetch already in flight. Cancelling the
    /// calling task withdraws this caller only.
    ///
    /// - Parameter page: The page number, from 1.
    /// - Returns: The page.
    /// - Throws: A `URLError`, a ``NetworkingError``, or `CancellationError`.
    public func questions(page: Int = 1) async throws -> QuestionPage {
        let url = url(page: page)
        return try await queueManager.value(identifier: url.absoluteString) {
            QuestionsFetchOperation(url: url, session: session, onRequest: onRequest)
        }
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }
}
