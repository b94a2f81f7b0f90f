import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A canned HTTP response that an ``HTTPStub`` answers for a path.
public struct StubResponse: Sendable, Equatable {
    /// The HTTP status code, such as `200` or `404`.
    public var statusCode: Int

    /// The header fields, such as `Content-Type`.
    public var headers: [String: String]

    /// The response body.
    public var body: Data

    /// How long the stub waits after receiving the request before answering. `.zero` answers at once.
    public var delay: Duration

    /// How many parts the body is sent in, one after the other: more than one lets a session
    /// report progress. Defaults to 1.
    public var parts = 1

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
    public static func json(_ body: Data, statusCode: Int = 200) -> StubResponse {
        StubResponse(
            statusCode: statusCode, headers: ["Content-Type": "application/json; charset=utf-8"], body: body)
    }

    /// A JSON response with `Content-Type: application/json`.
    ///
    /// - Parameters:
    ///   - body: The JSON text, sent as UTF-8.
    ///   - statusCode: The HTTP status code; `200` by default.
    /// - Returns: The response.
    public static func json(_ body: String, statusCode: Int = 200) -> StubResponse {
        json(Data(body.utf8), statusCode: statusCode)
    }

    /// A plain-text response whose body is the status's reason phrase, such as `not found`.
    ///
    /// - Parameter statusCode: The HTTP status code, such as `404` or `500`.
    /// - Returns: The response.
    public static func status(_ statusCode: Int) -> StubResponse {
        StubResponse(
            statusCode: statusCode,
            headers: ["Content-Type": "text/plain; charset=utf-8"],
            body: Data("\(HTTPURLResponse.localizedString(forStatusCode: statusCode))\n".utf8)
        )
    }

    /// A `200 OK` with `Content-Type: application/json` and `Content-Length: 0`.
    public static let emptyBody = StubResponse(
        statusCode: 200, headers: ["Content-Type": "application/json; charset=utf-8"], body: Data())

    /// A `200 OK` with `Content-Type: application/json` and a body that no JSON parser accepts.
    public static let malformedJSON = StubResponse.json(#"{"items":[{"question_id":1,"title":"Truncated"#)

    /// Returns a copy of this response whose body is sent in `parts` parts, with its length stated
    /// in `Content-Length`.
    ///
    /// - Parameter parts: How many parts, 1 or more.
    /// - Returns: The response.
    public func inParts(_ parts: Int) -> StubResponse {
        var copy = self
        copy.parts = max(1, parts)
        copy.headers["Content-Length"] = "\(body.count)"
        return copy
    }

    /// Returns a copy of this response that the stub answers only after `delay` has passed.
    ///
    /// - Parameter delay: How long to wait after receiving the request.
    /// - Returns: The delayed response.
    public func delayed(by delay: Duration) -> StubResponse {
        var copy = self
        copy.delay = delay
        return copy
    }
}
