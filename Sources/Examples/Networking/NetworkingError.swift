/// Why a response could not become a value.
public enum NetworkingError: Error, Equatable, Sendable {
    /// No HTTP response, or an empty body.
    case missingData
    /// The body was not the JSON expected.
    case serialization
    /// The server answered with a status outside 200–299.
    case invalidStatusCode(Int)
}
