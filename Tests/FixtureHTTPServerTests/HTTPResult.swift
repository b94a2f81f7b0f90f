import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What a URLSession data task delivered.
struct HTTPResult: Sendable {
    var statusCode: Int?
    var headers: [String: String] = [:]
    var body = Data()
    var error: (any Error)?

    init(data: Data?, response: URLResponse?, error: (any Error)?) {
        let http = response as? HTTPURLResponse
        statusCode = http?.statusCode
        for (name, value) in http?.allHeaderFields ?? [:] {
            if let name = name as? String, let value = value as? String {
                headers[name.lowercased()] = value
            }
        }
        body = data ?? Data()
        self.error = error
    }

    init(timedOut: Void) {
        error = URLError(.timedOut)
    }

    var urlErrorCode: URLError.Code? {
        (error as? URLError)?.code
    }
}
