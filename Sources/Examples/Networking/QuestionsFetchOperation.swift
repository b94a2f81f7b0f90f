import CoalescingOperations
import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Fetches one page of questions with a `URLSession` data task. Identical requests (the same URL)
/// coalesce; cancelling the work cancels the data task.
public final class QuestionsFetchOperation: CoalescibleOperation<QuestionPage>, @unchecked Sendable {
    // @unchecked: `dataTask` is guarded by `lock`; the other properties are immutable.

    /// The page requested.
    public let url: URL
    private let session: URLSession
    private let onRequest: @Sendable (URL) -> Void
    private let lock = NSLock()
    private var dataTask: URLSessionDataTask?

    /// Creates a fetch whose caller, if any, is `completionHandler`.
    ///
    /// - Parameters:
    ///   - url: The page to fetch; also the operation's identifier.
    ///   - session: The session that runs the data task.
    ///   - onRequest: Called when the request is sent, for logging or metrics.
    ///   - callBackQueue: Where `completionHandler` runs; nil runs it where the fetch finishes.
    ///   - completionHandler: Called once with the page; a transport error (`URLError`); a
    ///     ``NetworkingError``; or a `CoalescingError` or `CancellationError`. Nil for a fetch
    ///     whose callers come through the manager's `value` or `identifier:` methods.
    public init(
        url: URL,
        session: URLSession,
        onRequest: @escaping @Sendable (URL) -> Void = { _ in },
        callBackQueue: OperationQueue? = nil,
        completionHandler: (@Sendable (Result<QuestionPage, Error>) -> Void)? = nil
    ) {
        self.url = url
        self.session = session
        self.onRequest = onRequest
        super.init(identifier: url.absoluteString, callBackQueue: callBackQueue, completionHandler: completionHandler)
    }

    /// Starts the data task; its completion finishes the operation.
    public override func main() {
        var request = URLRequest(url: url)
        request.httpMethod = "GET"
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        let task = session.dataTask(with: request) { data, response, error in
            // Out of `cancel()`'s reach first: FoundationNetworking calls this before the task
            // leaves its session, and cancelling it in between traps the process on Linux.
            self.lock.withLock { self.dataTask = nil }
            self.finish(
                result: HTTPResponseDecoder.decode(QuestionPage.self, data: data, response: response, error: error))
        }
        // Checked under the lock that `cancel()` takes after marking the operation cancelled, so
        // a cancellation racing this start either sees the task or stops it from being sent.
        let shouldStart = lock.withLock {
            guard !isCancelled else { return false }
            dataTask = task
            return true
        }
        if shouldStart {
            onRequest(url)
            task.resume()
        }
    }

    /// Cancels the work for every caller and stops the data task; for an operation that joined,
    /// withdraws its caller only.
    public override func cancel() {
        super.cancel()
        lock.withLock { dataTask }?.cancel()
    }
}
