import Dispatch
import Foundation
import TestSupport

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A URLSession without caches, with synchronous helpers so tests can wait on semaphores instead of sleeping.
final class HTTPTestClient: Sendable {
    let session: URLSession

    init() {
        let configuration = URLSessionConfiguration.ephemeral
        // A cached response would hide a request from the server's counters.
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.timeoutIntervalForRequest = 10
        session = URLSession(configuration: configuration)
    }

    func invalidate() {
        session.invalidateAndCancel()
    }

    /// Starts a request; `completion` runs on the session's queue.
    @discardableResult
    func start(
        _ request: URLRequest, completion: @escaping @Sendable (HTTPResult) -> Void
    ) -> URLSessionDataTask {
        let task = session.dataTask(with: request) { data, response, error in
            completion(HTTPResult(data: data, response: response, error: error))
        }
        task.resume()
        return task
    }

    /// Starts a GET; `completion` runs on the session's queue.
    @discardableResult
    func start(_ url: URL, completion: @escaping @Sendable (HTTPResult) -> Void) -> URLSessionDataTask {
        start(URLRequest(url: url), completion: completion)
    }

    /// Performs a request and blocks until it finishes (or a generous timeout passes).
    func perform(_ request: URLRequest) -> HTTPResult {
        let result = LockedBox<HTTPResult?>(nil)
        let finished = DispatchSemaphore(value: 0)
        start(request) { outcome in
            result.value = outcome
            finished.signal()
        }
        guard finished.wait(timeout: .now() + .seconds(10)) == .success else { return HTTPResult(timedOut: ()) }
        return result.value ?? HTTPResult(timedOut: ())
    }

    /// Performs a GET and blocks until it finishes.
    func get(_ url: URL) -> HTTPResult {
        perform(URLRequest(url: url))
    }
}
