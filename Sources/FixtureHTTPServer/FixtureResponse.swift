import Foundation

/// A canned HTTP response that a ``FixtureHTTPServer`` sends for a route.
///
/// The server always adds `Content-Length` and `Connection: close`, and adds `Cache-Control: no-store` unless the
/// response sets its own, so that a client's URL cache never hides a request from the server's counters.
public struct FixtureResponse: Sendable, Equatable {
    /// The HTTP status code, such as `200` or `404`.
    public var statusCode: Int

    /// Extra header fields, such as `Content-Type`. `Content-Length` and `Connection` are ignored here because the
    /// server always writes its own.
    public var headers: [String: String]

    /// The response body.
    public var body: Data

    /// How long the server waits after reading the request before answering. `.zero` answers at once.
    public var delay: Duration

    /// Creates a response.
    ///
    /// - Parameters:
    ///   - statusCode: The HTTP status code.
    ///   - headers: Extra header fields.
    ///   - body: The body bytes.
    ///   - delay: How long to wait before answering.
    public init(statusCode: Int = 200, headers: [String: String] = [:], body: Data = Data(), delay: Duration = .zero) {
        self.statusCode = statusCode
        self.headers = headers
        self.body = body
        self.delay = delay
    }

    /// A JSON response with `Content-Type: application/json`.
    ///
    /// - Parameters:
    ///   - body: The JSON bytes, sent as given.
    ///   - statusCode: The HTTP status code; `200` by default.
    /// - Returns: The response.
    public static func json(_ body: Data, statusCode: Int = 200) -> FixtureResponse {
        FixtureResponse(
            statusCode: statusCode, headers: ["Content-Type": "application/json; charset=utf-8"], body: body)
    }

    /// A JSON response with `Content-Type: application/json`.
    ///
    /// - Parameters:
    ///   - body: The JSON text, sent as UTF-8.
    ///   - statusCode: The HTTP status code; `200` by default.
    /// - Returns: The response.
    public static func json(_ body: String, statusCode: Int = 200) -> FixtureResponse {
        json(Data(body.utf8), statusCode: statusCode)
    }

    /// A plain-text response whose body is the status line's reason phrase, such as `Not Found`.
    ///
    /// - Parameter statusCode: The HTTP status code, such as `404` or `500`.
    /// - Returns: The response.
    public static func status(_ statusCode: Int) -> FixtureResponse {
        FixtureResponse(
            statusCode: statusCode,
            headers: ["Content-Type": "text/plain; charset=utf-8"],
            body: Data("\(reasonPhrase(for: statusCode))\n".utf8)
        )
    }

    /// A `200 OK` with `Content-Type: application/json` and `Content-Length: 0`.
    public static let emptyBody = FixtureResponse(
        statusCode: 200, headers: ["Content-Type": "application/json; charset=utf-8"], body: Data())

    /// A `200 OK` with `Content-Type: application/json` and a body that no JSON parser accepts.
    public static let malformedJSON = FixtureResponse.json(#"{"items":[{"question_id":1,"title":"Truncated"#)

    /// Returns a copy of this response that the server sends only after `delay` has passed.
    ///
    /// - Parameter delay: How long to wait after reading the request.
    /// - Returns: The delayed response.
    public func delayed(by delay: Duration) -> FixtureResponse {
        var copy = self
        copy.delay = delay
        return copy
    }

    /// The standard reason phrase for a status code, or a generic one for its class.
    static func reasonPhrase(for statusCode: Int) -> String {
        switch statusCode {
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 100..<200: "Informational"
        case 200..<300: "Success"
        case 300..<400: "Redirection"
        case 400..<500: "Client Error"
        default: "Server Error"
        }
    }

    /// The complete HTTP/1.1 message: status line, headers and body.
    func serialized() -> [UInt8] {
        var lines = ["HTTP/1.1 \(statusCode) \(Self.reasonPhrase(for: statusCode))"]
        let reserved: Set<String> = ["content-length", "connection"]
        // Sorted so the bytes on the wire are the same on every run.
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) where !reserved.contains(name.lowercased()) {
            lines.append("\(name): \(value)")
        }
        if !headers.keys.contains(where: { $0.lowercased() == "cache-control" }) {
            lines.append("Cache-Control: no-store")
        }
        lines.append("Content-Length: \(body.count)")
        lines.append("Connection: close")
        return Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8) + Array(body)
    }
}
