import Foundation

/// What makes two HTTP requests the same request: the one thing that decides whether a caller
/// may be handed another caller's response (Guarantees 40 and 41).
///
/// A key holds the method, the full URL, every header field but the ones ``HTTPKeying`` names as
/// carrying no meaning for the response, what else of the request changes its answer (with
/// URLSession, its cache policy, timeout and cookie handling, and the cookies and credentials the
/// session adds from its stores), and the caller's own sharing key,
/// if any. A request that must not share gets a key equal to no other's.
///
/// Its ``description`` names the header fields in the key, never their values: events, logs and
/// spans carry keys, and an `Authorization` value has no place there.
public struct HTTPRequestKey: Hashable, Sendable, CustomStringConvertible {
    /// The request's body, as the key sees it.
    public enum Body: Sendable, Hashable {
        /// No body.
        case none
        /// A body the key can hold.
        case bytes(Data)
        /// A body the key cannot read, such as a stream: the request shares with nobody, as two such
        /// bodies cannot be told apart.
        case unreadable
    }

    /// The method, upper-cased: `GET`.
    public let method: String
    /// The full URL, as sent.
    public let url: String
    /// The header fields in the key: names lower-cased, sorted by name, values as sent.
    let fields: [Field]
    /// What else of the request changes its answer, in the front-end's words.
    let transport: [String]
    let sharing: Sharing

    /// Whom the request shares with.
    enum Sharing: Hashable {
        /// Requests whose keys are otherwise equal, with this body, if it has one, and under this
        /// sharing key, if the caller gave one.
        case shared(body: Data?, key: String?)
        /// Nobody: the identifier makes the key equal to no other.
        case alone(UUID)
    }

    struct Field: Hashable, Sendable {
        let name: String
        let value: String
    }

    /// Builds the key of a request, or throws ``HTTPCoalescingError/invalidRequest(_:)`` for a
    /// request that cannot be sent: no URL, a URL with no host, or a scheme other than `http` and
    /// `https`.
    ///
    /// - Parameters:
    ///   - method: The request's method; nil or empty is `GET`.
    ///   - url: The request's URL.
    ///   - headers: Its header fields, in any order, names in any case; a name may repeat.
    ///   - body: Its body.
    ///   - transport: What else of the request changes its answer, as strings a front-end
    ///     chooses, such as a cache policy; requests share only when these are equal.
    ///   - sharing: Whether, and under what key, the caller lets this request share.
    ///   - keying: Which methods share without a sharing key, and which header fields are left out.
    /// - Throws: ``HTTPCoalescingError/invalidRequest(_:)``, saying what is wrong.
    public init(
        method: String?, url: URL?, headers: [(name: String, value: String)], body: Body,
        transport: [String] = [], sharing: HTTPSharing = .automatic, keying: HTTPKeying = .standard
    ) throws {
        guard let url else { throw HTTPCoalescingError.invalidRequest("the request has no URL") }
        let scheme = url.scheme?.lowercased() ?? ""
        guard scheme == "http" || scheme == "https" else {
            throw HTTPCoalescingError.invalidRequest(
                "\(url.absoluteString): the scheme \"\(scheme)\" is not coalesced; only http and https are")
        }
        guard let host = url.host, !host.isEmpty else {
            throw HTTPCoalescingError.invalidRequest("\(url.absoluteString): the URL has no host")
        }
        let method = (method ?? "").isEmpty ? "GET" : method!.uppercased()
        self.method = method
        self.url = url.absoluteString
        self.transport = transport
        var fields: [Field] = []
        for (name, value) in headers where !keying.ignoredHeaders.contains(name.lowercased()) {
            fields.append(Field(name: name.lowercased(), value: value))
        }
        // Stable, so that repeated fields keep their order, which can carry meaning.
        self.fields = fields.enumerated().sorted { ($0.element.name, $0.offset) < ($1.element.name, $1.offset) }
            .map(\.element)
        switch (sharing.mode, body) {
        case (.never, _), (_, .unreadable):
            // Two bodies the key cannot read cannot be told apart: a sharing key does not stand for one.
            self.sharing = .alone(UUID())
        case (.key(let key), .bytes(let bytes)):
            self.sharing = .shared(body: bytes, key: key)
        case (.key(let key), .none):
            self.sharing = .shared(body: nil, key: key)
        case (.automatic, .none) where keying.sharedMethods.contains(method):
            self.sharing = .shared(body: nil, key: nil)
        case (.automatic, .bytes(let bytes)) where keying.sharedMethods.contains(method) && !keying.isSafe(method):
            // A method the app declared shared, such as a query sent as a POST: the body is its question.
            self.sharing = .shared(body: bytes, key: nil)
        case (.automatic, _):
            // An unsafe method, or a safe one whose body would make it differ: nobody else's.
            self.sharing = .alone(UUID())
        }
    }

    /// Whether this request may share a response with another caller's.
    public var shares: Bool {
        if case .shared = sharing { true } else { false }
    }

    /// The key as one string, equal for equal keys and different for different ones: an
    /// operation's identifier.
    public var identifier: String {
        var parts = [method, url] + transport + fields.flatMap { [$0.name, $0.value] }
        switch sharing {
        case .shared(let body, let key):
            parts += [key.map { "key " + $0 } ?? "", body.map { "body " + $0.base64EncodedString() } ?? ""]
        case .alone(let identifier):
            parts.append("alone " + identifier.uuidString)
        }
        // Each part prefixed by its length, so that no two lists of parts read the same.
        return parts.map { "\($0.utf8.count):\($0)" }.joined(separator: ",")
    }

    /// `GET https://api.example.com/me [accept-language, authorization]`: the method, the URL and
    /// the names of the header fields in the key, without their values.
    public var description: String {
        let names = fields.map(\.name)
        let extra =
            switch sharing {
            case .shared(_, nil): ""
            case .shared: " (shared by key)"
            case .alone: " (not shared)"
            }
        return "\(method) \(url)" + (names.isEmpty ? "" : " [\(names.joined(separator: ", "))]") + extra
    }
}

/// Whether a request may share its response with other callers, and under what key.
public struct HTTPSharing: Sendable, Hashable {
    enum Mode: Hashable {
        case automatic, key(String), never
    }

    let mode: Mode

    /// The default: requests of a shared method (`GET` and `HEAD`, see ``HTTPKeying``) with no
    /// body share when their keys are equal; any other request shares with nobody.
    public static let automatic = HTTPSharing(mode: .automatic)

    /// The request shares with nobody: it runs for this caller alone, with the same controls.
    public static let never = HTTPSharing(mode: .never)

    /// The caller vouches that requests with this key and an otherwise equal request (method,
    /// URL, header fields and body) are one request, whatever the method: for example a `POST`
    /// with an idempotency key, sent once for every caller holding it. On a `GET`, it narrows the
    /// key: only callers passing the same string share. A body the key cannot read (a stream, or
    /// any AsyncHTTPClient body) still keeps the request to its caller: two such bodies cannot be
    /// told apart.
    ///
    /// - Parameter key: The sharing key, such as the request's `Idempotency-Key`.
    /// - Returns: The sharing.
    public static func key(_ key: String) -> HTTPSharing { HTTPSharing(mode: .key(key)) }
}

/// Which methods share by default, and which header fields the key leaves out.
///
/// ``standard`` is safe: only `GET` and `HEAD` share, and every header field is in the key but
/// the ones that identify a call rather than ask for something (trace and request IDs). Both
/// widenings are named `unsafe`, as what they allow can hand one caller's response to another.
public struct HTTPKeying: Sendable, Hashable {
    /// Methods whose requests share without a sharing key, upper-cased.
    public private(set) var sharedMethods: Set<String>
    /// Header fields left out of the key, lower-cased.
    public private(set) var ignoredHeaders: Set<String>

    /// Header fields that always stay in the key: a response for one user never reaches another.
    public static let credentialHeaders: Set<String> = ["authorization", "proxy-authorization", "cookie"]

    /// Only `GET` and `HEAD` share; every header field is in the key but W3C trace context
    /// (`traceparent`, `tracestate`, `baggage`), Zipkin's `b3` fields, `x-amzn-trace-id`,
    /// `x-request-id` and `x-correlation-id`, which name a call, not what it asks for.
    public static let standard = HTTPKeying(
        sharedMethods: ["GET", "HEAD"],
        ignoredHeaders: [
            "traceparent", "tracestate", "baggage", "b3", "x-b3-traceid", "x-b3-spanid", "x-b3-parentspanid",
            "x-b3-sampled", "x-b3-flags", "x-amzn-trace-id", "x-request-id", "x-correlation-id",
        ])

    /// Leaves more header fields out of the key, so that requests differing only in them share.
    ///
    /// Unsafe: a field that changes the response (a locale, a feature flag, an API key under a
    /// name of its own) hands one caller what was meant for another. ``credentialHeaders`` are
    /// never left out; naming one traps.
    ///
    /// - Parameter names: The header fields to leave out, in any case.
    /// - Returns: The keying with those fields left out.
    public func unsafeIgnoringHeaders(_ names: Set<String>) -> HTTPKeying {
        let lowered = Set(names.map { $0.lowercased() })
        precondition(
            lowered.isDisjoint(with: Self.credentialHeaders),
            "HTTPKeying: \(lowered.intersection(Self.credentialHeaders).sorted()) can never leave the key")
        var keying = self
        keying.ignoredHeaders.formUnion(lowered)
        return keying
    }

    /// Lets requests of more methods share without a sharing key, their body in the key: for an
    /// API that asks read-only questions with a `POST`, such as GraphQL queries or a search.
    ///
    /// Unsafe: a request of such a method that changes something is sent once for every caller
    /// with an equal request, as one.
    ///
    /// - Parameter methods: The methods, in any case.
    /// - Returns: The keying with those methods shared.
    public func unsafeSharingMethods(_ methods: Set<String>) -> HTTPKeying {
        var keying = self
        keying.sharedMethods.formUnion(methods.map { $0.uppercased() })
        return keying
    }

    func isSafe(_ method: String) -> Bool { Self.standard.sharedMethods.contains(method) }
}

/// Why a coalesced HTTP request failed before, or instead of, its response.
///
/// A response of any status is a response, handed to every caller as it came; a transport error
/// (`URLError`, or the HTTP client's) reaches every caller as it is.
public enum HTTPCoalescingError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The request cannot be sent, and nothing was started; the text says why.
    case invalidRequest(String)
    /// The response's body is longer than the limit: every caller of the request fails, and
    /// the transfer stopped once the limit was passed.
    case bodyTooLarge(url: String, limit: Int)

    /// One sentence: what went wrong, and with which request.
    public var description: String {
        switch self {
        case .invalidRequest(let reason): "invalid request: \(reason)"
        case .bodyTooLarge(let url, let limit):
            "the response to \(url) is larger than the limit of \(limit) bytes (maximumBodySize)"
        }
    }
}
