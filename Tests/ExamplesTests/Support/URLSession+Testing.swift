import Foundation
import HTTPStub

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A URLSession that caches nothing and whose requests reach `stub`, which counts each one.
func makeSession(reaching stub: HTTPStub) -> URLSession {
    let configuration = URLSessionConfiguration.ephemeral
    stub.configure(configuration)
    return URLSession(configuration: configuration)
}
