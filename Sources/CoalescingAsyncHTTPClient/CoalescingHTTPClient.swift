#if AsyncHTTPClient
import AsyncHTTPClient
import CoalescingHTTP
import CoalescingOperations
import Foundation
import NIOCore
import NIOHTTP1
import Tracing

/// An AsyncHTTPClient `HTTPClient` whose identical requests in flight are sent once, every caller
/// receiving the response and its body: for a server whose handlers load the same resource at once.
///
/// Send through this client's ``execute(_:sharing:timeout:requestTimeout:whenAbandoned:progress:)``
/// where you called `client.execute(_:timeout:)`. Mind the labels: here `timeout:` is how long
/// this caller waits, a `Duration`, as with every coalescer; AsyncHTTPClient's deadline for the
/// request, its `timeout:`, is `requestTimeout:`.
///
/// ```swift
/// import AsyncHTTPClient
/// import CoalescingAsyncHTTPClient
/// import NIOCore
///
/// let http = CoalescingHTTPClient()  // over HTTPClient.shared
///
/// func profile(token: String) async throws -> ByteBuffer {
///     var request = HTTPClientRequest(url: "https://api.example.com/me")
///     request.headers.add(name: "Authorization", value: "Bearer \(token)")
///     let response = try await http.execute(request)  // one request for every caller with this token
///     return response.body
/// }
/// ```
///
/// - Which requests share is decided by their ``HTTPRequestKey``, as with
///   ``CoalescingURLSession``: by default only `GET` and `HEAD`, with no body, and only when their
///   method, URL and header fields (`Authorization` included) are equal. A request with a body
///   shares with nobody, sharing key or not: the key cannot read an AsyncHTTPClient body, and
///   requests whose bodies it cannot tell apart are never joined (as `CoalescingURLSession` keeps
///   a streamed body). A request with a TLS configuration of its own shares with nobody.
/// - Each caller withdraws on its own: its task cancelled, or its `timeout` passed. The request is
///   cancelled when the last caller has withdrawn, unless it was started with
///   `whenAbandoned: .runToCompletion`.
/// - AsyncHTTPClient has no request priority: only the task that runs the request has one, its
///   most urgent caller's. Every caller that asks for progress receives the transfer's.
/// - A body longer than ``maximumBodySize`` stops the transfer and fails every caller with
///   ``HTTPCoalescingError/bodyTooLarge(url:limit:)``.
/// - The request runs in the `ServiceContext` of the caller that sent it, so that the span
///   AsyncHTTPClient starts for it, if its configuration has a tracer, is a child of that caller's
///   span; the callers that joined get no span of it.
/// - Its events feed the bridges as a task coalescer's do: pass `CoalescingMetrics`' or
///   `CoalescingLogging`'s `record` as its observer.
public final class CoalescingHTTPClient: Sendable {
    /// The client that sends the requests; this object does not shut it down.
    public let client: HTTPClient
    /// Which methods share without a sharing key, and which header fields the key leaves out.
    public let keying: HTTPKeying
    /// The longest body a response may have, in bytes.
    public let maximumBodySize: Int
    let coalescer: InFlightTaskCoalescer<HTTPRequestKey, CoalescedHTTPResponse>

    /// The default ``maximumBodySize``: 32 MiB, as ``CoalescingURLSession``'s.
    public static let defaultMaximumBodySize = CoalescingURLSession.defaultMaximumBodySize

    /// Creates a client that coalesces its identical requests.
    ///
    /// - Parameters:
    ///   - client: The client that sends the requests; `HTTPClient.shared` by default. Shutting it
    ///     down stays its owner's task.
    ///   - keying: Which methods share, and which header fields the key leaves out; the default is
    ///     safe (``HTTPKeying/standard``).
    ///   - maximumBodySize: The longest body a response may have, in bytes; 32 MiB by default.
    ///   - observer: Receives one ``CoalescingEvent`` per step, as a task coalescer's observer
    ///     does; its keys describe requests without header values. Hand it a bridge's `record`.
    ///   - stallThreshold: Reports requests in flight this long, as a task coalescer does.
    ///   - clock: The clock that callers' timeouts and the stall threshold are measured on.
    public init<C: Clock>(
        client: HTTPClient = .shared, keying: HTTPKeying = .standard, maximumBodySize: Int = defaultMaximumBodySize,
        observer: (@Sendable (CoalescingEvent<HTTPRequestKey>) -> Void)? = nil, stallThreshold: Duration? = nil,
        clock: C = ContinuousClock()
    ) where C.Duration == Duration {
        precondition(maximumBodySize >= 0, "CoalescingHTTPClient: maximumBodySize must not be negative")
        self.client = client
        self.keying = keying
        self.maximumBodySize = maximumBodySize
        coalescer = InFlightTaskCoalescer(observer: observer, stallThreshold: stallThreshold, clock: clock)
    }

    /// Sends `request`, or joins the identical one in flight, and returns its response with its
    /// whole body.
    ///
    /// - Parameters:
    ///   - request: The request. Its key decides whom it shares with: see ``key(for:sharing:)``.
    ///   - sharing: ``HTTPSharing/automatic`` (safe methods without a body share by key), a sharing
    ///     key that opts a request of any method in, or ``HTTPSharing/never``. A request with a
    ///     body shares with nobody: the key cannot read it.
    ///   - timeout: How long this caller waits at most; the request goes on for the others.
    ///   - requestTimeout: The request's own deadline, as `HTTPClient.execute(_:timeout:)` takes
    ///     it, body included; read from the caller that sends the request.
    ///   - whenAbandoned: Whether the request is cancelled when every caller has withdrawn (the
    ///     default), or runs to its end; read from the caller that sends the request.
    ///   - progress: Receives the transfer's progress, in bytes of the body; the total is the
    ///     `Content-Length`, or -1 without one.
    /// - Returns: The response as the client received it, whatever its status, its body this
    ///   caller's own.
    /// - Throws: ``HTTPCoalescingError/invalidRequest(_:)`` at once, sending nothing;
    ///   ``HTTPCoalescingError/bodyTooLarge(url:limit:)``; the client's `HTTPClientError` or
    ///   connection error; `CancellationError` if this caller's task was cancelled;
    ///   ``CoalescingError/cancelled`` if the request was cancelled for everyone, through
    ///   ``cancel(_:sharing:)`` or ``cancelAll()``; or ``CoalescingError/timedOut`` if `timeout` passed first.
    public func execute(
        _ request: HTTPClientRequest, sharing: HTTPSharing = .automatic, timeout: Duration? = nil,
        requestTimeout: TimeAmount = .seconds(30), whenAbandoned: AbandonedWorkPolicy = .cancel,
        progress: (@Sendable (WorkProgress) -> Void)? = nil
    ) async throws -> CoalescedHTTPResponse {
        let key = try key(for: request, sharing: sharing)
        // The work's task inherits no task-local value; the sender's context is handed over, as
        // CoalescingTracing hands over the starting caller's span.
        let context = ServiceContext.current ?? .topLevel
        return try await coalescer.value(
            key: key, name: key.url, timeout: timeout, whenAbandoned: whenAbandoned, progress: progress
        ) { [client, maximumBodySize] in
            try await ServiceContext.withValue(context) {
                try await Self.load(request, from: client, timeout: requestTimeout, limit: maximumBodySize)
            }
        }
    }

    /// Sends the request and reads its body, up to `limit` bytes, reporting the bytes read.
    private static func load(
        _ request: HTTPClientRequest, from client: HTTPClient, timeout: TimeAmount, limit: Int
    ) async throws -> CoalescedHTTPResponse {
        let response = try await client.execute(request, timeout: timeout)
        let length = response.headers.first(name: "content-length").flatMap { Int($0) }
        // Throwing drops the body's iterator, which cancels the rest of the transfer.
        if let length, length > limit { throw HTTPCoalescingError.bodyTooLarge(url: request.url, limit: limit) }
        let reporter = ProgressReporter.current
        let total = Int64(length ?? -1)
        reporter.report(progress: WorkProgress(completed: 0, total: total))
        var body = ByteBuffer()
        if let length { body.reserveCapacity(length) }
        for try await chunk in response.body {
            guard body.readableBytes + chunk.readableBytes <= limit else {
                throw HTTPCoalescingError.bodyTooLarge(url: request.url, limit: limit)
            }
            var chunk = chunk
            body.writeBuffer(&chunk)
            reporter.report(progress: WorkProgress(completed: Int64(body.readableBytes), total: total))
        }
        return CoalescedHTTPResponse(
            status: response.status, headers: response.headers, version: response.version, body: body)
    }

    /// The key `request` is coalesced under.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - sharing: As given to ``execute(_:sharing:timeout:requestTimeout:whenAbandoned:progress:)``.
    /// - Returns: The key; one equal to no other if the request does not share.
    /// - Throws: ``HTTPCoalescingError/invalidRequest(_:)`` for a request that cannot be sent.
    public func key(for request: HTTPClientRequest, sharing: HTTPSharing = .automatic) throws -> HTTPRequestKey {
        // TLS configurations cannot be compared, and the local address is where the request
        // leaves from: either can change the answer.
        let transport = request.localAddress.map { ["local address \($0)"] } ?? []
        return try HTTPRequestKey(
            method: request.method.rawValue, url: URL(string: request.url),
            headers: request.headers.map { (name: $0.name, value: $0.value) },
            body: request.body == nil ? .none : .unreadable, transport: transport,
            sharing: request.tlsConfiguration == nil ? sharing : .never, keying: keying)
    }

    /// Lets the next identical request be sent anew, while the callers already waiting keep
    /// waiting for the one in flight: use it after a write that changes what the request reads.
    ///
    /// - Parameters:
    ///   - request: The request to forget.
    ///   - sharing: As given to ``execute(_:sharing:timeout:requestTimeout:whenAbandoned:progress:)``.
    /// - Returns: Whether such a request was in flight.
    @discardableResult public func forget(_ request: HTTPClientRequest, sharing: HTTPSharing = .automatic) -> Bool {
        guard let key = try? key(for: request, sharing: sharing) else { return false }
        return coalescer.forget(key: key)
    }

    /// Cancels the request in flight for every caller, who throw ``CoalescingError/cancelled``.
    ///
    /// - Parameters:
    ///   - request: The request to cancel.
    ///   - sharing: As given to ``execute(_:sharing:timeout:requestTimeout:whenAbandoned:progress:)``.
    /// - Returns: Whether such a request was in flight.
    @discardableResult public func cancel(_ request: HTTPClientRequest, sharing: HTTPSharing = .automatic) -> Bool {
        guard let key = try? key(for: request, sharing: sharing) else { return false }
        return coalescer.cancel(key: key)
    }

    /// Cancels every request in flight, forgotten ones included.
    ///
    /// - Returns: Whether any was in flight.
    @discardableResult public func cancelAll() -> Bool { coalescer.cancelAll() }

    /// What the client has done since it was created: callers, requests sent (work started),
    /// joins, withdrawals.
    public var statistics: CoalescingStatistics { coalescer.statistics }
}

/// A response with its whole body, as every caller of a request receives it.
///
/// The body is a value: a caller that reads or changes its copy changes no other caller's.
public struct CoalescedHTTPResponse: Sendable {
    /// The response's status, whatever it is: a 404 or a 500 is a response, not an error.
    public var status: HTTPResponseStatus
    /// The response's header fields.
    public var headers: HTTPHeaders
    /// The HTTP version the response came in.
    public var version: HTTPVersion
    /// The whole body.
    public var body: ByteBuffer

    /// Creates a response, as a test double of the client would.
    ///
    /// - Parameters:
    ///   - status: The status.
    ///   - headers: The header fields.
    ///   - version: The HTTP version.
    ///   - body: The whole body.
    public init(status: HTTPResponseStatus, headers: HTTPHeaders, version: HTTPVersion = .http1_1, body: ByteBuffer) {
        (self.status, self.headers, self.version, self.body) = (status, headers, version, body)
    }
}
#endif
