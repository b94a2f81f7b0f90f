import CoalescingHTTP
import Examples
import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One page of questions, requested through `CoalescingHTTP`: an `HTTPRequestOperation`, whose
/// identifier is the request's `HTTPRequestKey` (method, URL, header fields), sent by a
/// `CoalescingURLSession`'s session. It asks what the Examples' `QuestionsFetchOperation` asks
/// (`GET …/2.3/questions?page=N…`, `Accept: application/json`) and decodes the answer the same way.
final class QuestionsRequest: HTTPRequestOperation<QuestionPage>, @unchecked Sendable {
    // @unchecked: restated as Swift requires of an `Operation` subclass; adds only an immutable
    // closure to HTTPRequestOperation.

    private let onSend: @Sendable () -> Void

    /// - Parameters:
    ///   - url: The page, from ``url(page:baseURL:)``.
    ///   - http: The session that sends it.
    ///   - sharing: `.automatic` to coalesce identical requests, `.never` for a request of its own.
    ///   - onSend: Called when the request is sent, for the demo's tally.
    ///   - callBackQueue: Where `completionHandler` runs.
    ///   - completionHandler: The caller; nil for a caller that awaits the value.
    init(
        url: URL, http: CoalescingURLSession, sharing: HTTPSharing, onSend: @escaping @Sendable () -> Void,
        callBackQueue: OperationQueue? = nil,
        completionHandler: (@Sendable (Result<QuestionPage, Error>) -> Void)? = nil
    ) {
        var request = URLRequest(url: url)
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        self.onSend = onSend
        // Throws only for a URL that is not http(s) or has no host, which DemoOptions and the
        // embedded server never give.
        try! super.init(
            request: request, session: http, sharing: sharing, callBackQueue: callBackQueue,
            completionHandler: completionHandler
        ) { data, response in
            try HTTPResponseDecoder.decode(QuestionPage.self, data: data, response: response, error: nil).get()
        }
    }

    override func main() {
        if !isCancelled { onSend() }
        super.main()
    }

    /// The URL of one page of questions on Stack Overflow, newest activity first, under `baseURL`.
    static func url(page: Int, baseURL: URL) -> URL {
        var components = URLComponents(url: baseURL, resolvingAgainstBaseURL: false)!
        let path = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
        components.path = path + "/2.3/questions"
        components.queryItems = [
            URLQueryItem(name: "page", value: String(page)),
            URLQueryItem(name: "order", value: "desc"),
            URLQueryItem(name: "sort", value: "activity"),
            URLQueryItem(name: "site", value: "stackoverflow"),
        ]
        return components.url!
    }
}
