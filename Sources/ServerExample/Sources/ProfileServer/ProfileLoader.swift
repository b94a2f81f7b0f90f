import AsyncHTTPClient
import CoalescingOperations
import CoalescingTracing
import Foundation
import Logging
import NIOCore
import Tracing

/// Loads profiles from the upstream, coalescing identical loads in flight: one coalescer for this
/// kind of load, shared by every request of the application.
public final class ProfileLoader: Sendable {
    /// How the loader behaves.
    public struct Options: Sendable {
        /// The upstream's base URL, such as `http://127.0.0.1:9000`.
        public var upstream: String
        /// How long one request waits for its profile before it answers 504; nil waits for the load.
        public var timeout: Duration?
        /// What happens to a load when every request waiting for it has left.
        public var whenAbandoned: AbandonedWorkPolicy
        /// Whether identical loads are coalesced; without, every request loads, and waits as long
        /// as its load takes (no timeout).
        public var coalescing: Bool

        /// Creates the options.
        ///
        /// - Parameters:
        ///   - upstream: The upstream's base URL.
        ///   - timeout: How long one request waits; 2 seconds by default.
        ///   - whenAbandoned: What happens to an abandoned load; cancelled by default.
        ///   - coalescing: Whether to coalesce; true by default.
        public init(
            upstream: String, timeout: Duration? = .seconds(2), whenAbandoned: AbandonedWorkPolicy = .cancel,
            coalescing: Bool = true
        ) {
            self.upstream = upstream
            self.timeout = timeout
            self.whenAbandoned = whenAbandoned
            self.coalescing = coalescing
        }
    }

    private let options: Options
    private let client: HTTPClient
    private let logger: Logger
    private let profiles: TracedCoalescer<String, Profile>
    private let tracer: any Tracer

    /// Creates the loader.
    ///
    /// - Parameters:
    ///   - options: The upstream and how to load from it.
    ///   - client: The HTTP client; its owner shuts it down.
    ///   - observability: Where the metrics, logs and traces go.
    ///   - observer: Also receives the coalescer's events, after the metrics and the logs.
    public init(
        options: Options, client: HTTPClient, observability: Observability = Observability(),
        observer: (@Sendable (CoalescingEvent<String>) -> Void)? = nil
    ) {
        self.options = options
        self.client = client
        logger = observability.logger
        tracer = observability.tracer
        profiles = TracedCoalescer(observer: observability.observer(coalescer: "profiles", also: observer))
    }

    /// What the coalescer has done since the server started.
    public var statistics: CoalescingStatistics {
        profiles.statistics
    }

    /// The profile `id`, from the load in flight for it or from a new one.
    ///
    /// - Parameter id: The profile's identifier.
    /// - Returns: The profile.
    /// - Throws: ``UpstreamError`` if the upstream fails, `CoalescingError.timedOut` once the
    ///   timeout has passed, or `CancellationError` if the calling task is cancelled.
    public func profile(id: String) async throws -> Profile {
        guard options.coalescing else { return try await load(id: id) }
        return try await profiles.value(
            key: id, span: "load profile", tracer: tracer, timeout: options.timeout,
            whenAbandoned: options.whenAbandoned
        ) { [self] _ in
            // The work runs in a task of its own, with no request's task-local logger metadata:
            // what it logs says which work it is.
            try await load(id: id)
        }
    }

    private func load(id: String) async throws -> Profile {
        let path = id.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? id
        let request = HTTPClientRequest(url: "\(options.upstream)/profiles/\(path)")
        logger.debug("loading profile", metadata: ["key": "\(id)"])
        let response = try await client.execute(request, timeout: .seconds(30))
        guard response.status == .ok else { throw UpstreamError.status(Int(response.status.code)) }
        let body = try await response.body.collect(upTo: 1 << 20)
        do {
            return try JSONDecoder().decode(Profile.self, from: Data(body.readableBytesView))
        } catch {
            throw UpstreamError.unreadable
        }
    }
}

/// What went wrong upstream; the server answers it with 502.
public enum UpstreamError: Error, Equatable {
    /// The upstream answered this HTTP status instead of 200.
    case status(Int)
    /// The upstream's answer was not a profile.
    case unreadable
}
