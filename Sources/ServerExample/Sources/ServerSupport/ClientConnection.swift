import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// Whether the client of one connection has gone away, learnt from the connection's events
/// without reading from it: its next request stays where Hummingbird reads it, so the connection
/// stays open for it (keep-alive).
///
/// Hummingbird cancels no handler when its client goes away, and its own
/// `consumeWithCancellationOnInboundClose` notices by reading the connection's next bytes, after
/// which Hummingbird can only close the connection. Instead, ``ClientCloseHandler``, installed on
/// every connection by ``RunningServer``, hears the connection's input close (the client closed
/// it; Hummingbird allows half-closure, so this is an event, not the channel's closing) or the
/// connection end, and tells this object, which cancels the handlers waiting on it.
public final class ClientConnection: Sendable {
    private struct State {
        var isGone = false
        var next = 0
        var onGone: [Int: @Sendable () -> Void] = [:]
    }

    private let state = NIOLockedValueBox(State())

    /// The connections being served, by channel, so that a request's context finds its own.
    private static let open = NIOLockedValueBox([ObjectIdentifier: ClientConnection]())

    /// The connection of `channel`, if a ``ClientCloseHandler`` watches it.
    static func of(_ channel: any Channel) -> ClientConnection? {
        open.withLockedValue { $0[ObjectIdentifier(channel)] }
    }

    static func watch(_ channel: any Channel) -> ClientConnection {
        let connection = ClientConnection()
        open.withLockedValue { $0[ObjectIdentifier(channel)] = connection }
        return connection
    }

    static func unwatch(_ channel: any Channel) {
        _ = open.withLockedValue { $0.removeValue(forKey: ObjectIdentifier(channel)) }
    }

    /// Whether the client has gone away.
    public var isGone: Bool { state.withLockedValue(\.isGone) }

    /// Runs `operation`, cancelling it if the client goes away first; the connection stays open
    /// for the client's next request otherwise.
    ///
    /// - Parameter operation: The handler's work; it inherits the calling task's priority and
    ///   task-local values.
    /// - Returns: What `operation` returns.
    /// - Throws: What `operation` throws; a cancelled operation throws what it throws when
    ///   cancelled, usually `CancellationError`.
    public func cancellingWhenGone<Value: Sendable>(
        _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let work = Task(operation: operation)
        let id = state.withLockedValue { state -> Int? in
            guard !state.isGone else { return nil }
            state.next += 1
            state.onGone[state.next] = { work.cancel() }
            return state.next
        }
        if id == nil {
            work.cancel()
        }
        defer {
            if let id {
                _ = state.withLockedValue { $0.onGone.removeValue(forKey: id) }
            }
        }
        return try await withTaskCancellationHandler {
            try await work.value
        } onCancel: {
            work.cancel()
        }
    }

    /// The client has gone: cancels every operation waiting on it, once.
    func gone() {
        let cancellations = state.withLockedValue { state -> [@Sendable () -> Void] in
            guard !state.isGone else { return [] }
            state.isGone = true
            defer { state.onGone = [:] }
            return Array(state.onGone.values)
        }
        cancellations.forEach { $0() }
    }
}

/// Tells a connection's ``ClientConnection`` when its client goes away: installed once per
/// connection, after the HTTP codec, by ``RunningServer``. It passes every part on untouched.
final class ClientCloseHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    private var connection: ClientConnection?

    func handlerAdded(context: ChannelHandlerContext) {
        connection = ClientConnection.watch(context.channel)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        connection?.gone()
        ClientConnection.unwatch(context.channel)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .inputClosed? = event as? ChannelEvent {
            connection?.gone()
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection?.gone()
        context.fireChannelInactive()
    }
}

/// A request context that knows its connection's client: what a handler needs to stop its work
/// when the client goes away without closing connections that stay.
public struct ClientRequestContext: RequestContext {
    /// Hummingbird's own part of the context.
    public var coreContext: CoreRequestContextStorage
    /// The request's connection, when the server watches its connections (``RunningServer`` does).
    public let client: ClientConnection?

    /// Creates the context of a request that arrived on `source.channel`.
    ///
    /// - Parameter source: The channel and logger Hummingbird hands every request.
    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        client = ClientConnection.of(source.channel)
    }

    /// Answers what `operation` returns, cancelling it if the client goes away first. The
    /// connection stays open for the client's next request: no `Connection: close`.
    ///
    /// - Parameter operation: What to answer.
    /// - Returns: What `operation` returns.
    /// - Throws: `CancellationError` if the client went away, or what `operation` threw.
    public func cancellingOnDisconnect<Value: Sendable>(
        _ operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        guard let client else { return try await operation() }
        return try await client.cancellingWhenGone(operation)
    }
}
