import Hummingbird
import Logging
import ServiceLifecycle

/// A Hummingbird application serving a router on 127.0.0.1, until ``stop()``, watching each
/// connection for its client going away (``ClientRequestContext``).
public struct RunningServer: Sendable {
    /// The port it listens on: the one asked for, or the one the system chose for port 0.
    public let port: Int
    private let group: ServiceGroup
    private let run: Task<Void, any Error>

    /// Where to send requests, without a trailing slash.
    public var url: String { "http://127.0.0.1:\(port)" }

    /// Starts serving `router`, and returns once the server listens.
    ///
    /// - Parameters:
    ///   - router: What the server answers; with a ``ClientRequestContext``, its handlers can stop
    ///     their work when the client goes away.
    ///   - port: The port; 0, the default, lets the system choose a free one.
    ///   - logger: The server's logger.
    /// - Returns: The running server.
    /// - Throws: What stopped the server from starting, such as a port in use.
    public static func start<Context: RequestContext>(
        _ router: Router<Context>, port: Int = 0, logger: Logger
    ) async throws -> RunningServer where Context.Source == ApplicationRequestContextSource {
        let (ports, listening) = AsyncStream.makeStream(of: Int.self)
        let application = Application(
            router: router,
            // Every connection tells its requests when its client goes away (ClientConnection).
            server: .http1(configuration: .init(additionalChannelHandlers: [ClientCloseHandler()])),
            configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: port)),
            onServerRunning: { channel in
                listening.yield(channel.localAddress?.port ?? port)
                listening.finish()
            },
            logger: logger
        )
        // No signal handlers: whoever started the server stops it, by `stop()`.
        let group = ServiceGroup(services: [application], gracefulShutdownSignals: [], logger: logger)
        let run = Task {
            defer { listening.finish() }
            try await group.run()
        }
        for await port in ports {
            return RunningServer(port: port, group: group, run: run)
        }
        try await run.value
        throw CancellationError()  // the server ended without an error before it listened: cancelled
    }

    /// Returns when the server stops, which it does only when ``stop()`` is called or it fails.
    ///
    /// - Throws: What made the server fail.
    public func waitUntilStopped() async throws {
        try await run.value
    }

    /// Shuts the server down gracefully (it finishes the requests in progress and closes idle
    /// connections) and returns once it has stopped.
    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await run.value
    }
}
