import Foundation
import Synchronization

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A server inside the process: a `URLProtocol` that answers every request at once with 200 and a
/// small JSON body, and counts the requests it answered. No network, no latency: what is left of a
/// request is the session's own path, which is what the benchmarks set the coalescing session
/// against.
final class InstantStub: URLProtocol {
    /// The body of every answer: a page of one question, as the demo's server answers.
    static let body = Data(
        (#"{"items":[{"question_id":1,"title":"Coalescing","link":"https://example.com/q/1","score":3,"#
            + #""is_answered":true,"tags":["swift"]}],"has_more":false}"#).utf8)

    /// Requests answered since the process started.
    static let requests = Atomic(0)

    /// A configuration whose sessions send every request to this stub, with no cache.
    static func configuration() -> URLSessionConfiguration {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.protocolClasses = [InstantStub.self]
        configuration.urlCache = nil
        return configuration
    }

    /// The request every benchmark sends: a `GET` with an `Accept` field, as an app's.
    static let request: URLRequest = {
        var request = URLRequest(url: URL(string: "http://stub.invalid/2.3/questions?page=1&site=stackoverflow")!)
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        return request
    }()

    override class func canInit(with request: URLRequest) -> Bool {
        true  // only the benchmarks' sessions have this class
    }

    override class func canonicalRequest(for request: URLRequest) -> URLRequest {
        request
    }

    override func startLoading() {
        Self.requests.add(1, ordering: .relaxed)
        let response = HTTPURLResponse(
            url: request.url!, statusCode: 200, httpVersion: "HTTP/1.1",
            headerFields: ["Content-Type": "application/json", "Content-Length": String(Self.body.count)])!
        client?.urlProtocol(self, didReceive: response, cacheStoragePolicy: .notAllowed)
        client?.urlProtocol(self, didLoad: Self.body)
        client?.urlProtocolDidFinishLoading(self)
    }

    override func stopLoading() {}
}
