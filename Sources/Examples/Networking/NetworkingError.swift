import Foundation

/// Why a response could not become a value.
public enum NetworkingError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No HTTP response, or an empty body.
    case missingData
    /// The body was not JSON at all.
    case serialization
    /// The body was JSON, but not in the shape expected; the string says where and what.
    case unexpectedJSON(String)
    /// The server answered with a status outside 200–299.
    case invalidStatusCode(Int)

    /// One line a person can act on, without Foundation's error dump.
    public var description: String {
        switch self {
        case .missingData: "the response had no body"
        case .serialization: "the body is not valid JSON"
        case .unexpectedJSON(let problem): "the JSON is not in the expected shape: \(problem)"
        case .invalidStatusCode(let status): "the server answered HTTP \(status)"
        }
    }

    /// Classifies a decoding error: JSON that does not parse, or JSON of the wrong shape, named
    /// by the path to the value that was wrong, so that a mismatch can be found in the payload.
    init(_ error: DecodingError) {
        func path(_ codingPath: [any CodingKey]) -> String {
            let path = codingPath.map { key in key.intValue.map { "[\($0)]" } ?? ".\(key.stringValue)" }.joined()
            return path.isEmpty ? "the top level" : String(path.drop { $0 == "." })
        }
        switch error {
        case .keyNotFound(let key, let context):
            let parent = context.codingPath.isEmpty ? "the top level" : path(context.codingPath)
            self = .unexpectedJSON("\(parent) has no key '\(key.stringValue)'")
        case .typeMismatch(let type, let context):
            self = .unexpectedJSON("\(path(context.codingPath)) is not \(type) (\(context.debugDescription))")
        case .valueNotFound(let type, let context):
            self = .unexpectedJSON("\(path(context.codingPath)) is null, not \(type)")
        case .dataCorrupted(let context) where context.codingPath.isEmpty:
            self = .serialization
        case .dataCorrupted(let context):
            self = .unexpectedJSON("\(path(context.codingPath)): \(context.debugDescription)")
        @unknown default:
            self = .serialization
        }
    }
}
