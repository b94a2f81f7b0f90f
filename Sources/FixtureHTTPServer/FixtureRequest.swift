/// A request that a ``FixtureHTTPServer`` received, as recorded for inspection by tests.
public struct FixtureRequest: Sendable, Equatable, CustomStringConvertible {
    /// The request method, such as `GET`.
    public let method: String

    /// The request target exactly as sent: the path plus any query, such as `/2.3/questions?site=stackoverflow`.
    public let target: String

    /// The header fields, keyed by lowercased name; repeated fields are joined with `", "`.
    public let headers: [String: String]

    /// Creates a recorded request.
    ///
    /// - Parameters:
    ///   - method: The request method.
    ///   - target: The path plus any query.
    ///   - headers: The header fields, keyed by lowercased name.
    public init(method: String, target: String, headers: [String: String] = [:]) {
        self.method = method
        self.target = target
        self.headers = headers
    }

    /// The target without its query; this is what routes match against.
    public var path: String {
        String(target.prefix { $0 != "?" })
    }

    /// The query after the `?`, or `nil` if the target has none.
    public var query: String? {
        target.firstIndex(of: "?").map { String(target[target.index(after: $0)...]) }
    }

    /// The request line without its version, such as `GET /users/42`.
    public var description: String {
        "\(method) \(target)"
    }

    /// Parses a request head (request line and header fields, without the blank line that ends it).
    ///
    /// - Parameter head: The bytes before `\r\n\r\n`.
    /// - Returns: The request, or `nil` if the request line is malformed.
    static func parse(head: ArraySlice<UInt8>) -> FixtureRequest? {
        let text = String(decoding: head, as: UTF8.self)
        var lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)[...]
        guard let requestLine = lines.popFirst() else { return nil }
        let parts = requestLine.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3, parts[2].hasPrefix("HTTP/") else { return nil }
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = trimmed(line[..<colon]).lowercased()
            let value = String(trimmed(line[line.index(after: colon)...]))
            headers[name] = headers[name].map { "\($0), \(value)" } ?? value
        }
        return FixtureRequest(method: String(parts[0]), target: String(parts[1]), headers: headers)
    }

    /// The number of body bytes that follow the head, according to `Content-Length`.
    var contentLength: Int {
        headers["content-length"].flatMap { Int($0) }.map { max(0, $0) } ?? 0
    }

    private static func trimmed(_ text: Substring) -> Substring {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = text.firstIndex(where: { !isBlank($0) }), let last = text.lastIndex(where: { !isBlank($0) })
        else { return "" }
        return text[first...last]
    }
}
