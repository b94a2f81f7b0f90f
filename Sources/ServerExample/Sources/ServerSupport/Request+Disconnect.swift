import Hummingbird

extension Request {
    /// Answers what `operation` returns, cancelling it if the client disconnects first.
    ///
    /// Hummingbird cancels no handler when its client goes away; `consumeWithCancellationOnInboundClose`
    /// does, and then closes the connection after the response, since it has read the connection's
    /// next bytes. The response says `Connection: close`, so that a keep-alive client does not send
    /// its next request on a connection that is closing: errors that carry a status (such as an
    /// `HTTPError`) are answered the same way.
    ///
    /// - Parameters:
    ///   - context: The request's context.
    ///   - operation: What to answer.
    /// - Returns: The response, with `Connection: close`.
    /// - Throws: `CancellationError` if the client disconnected, or what `operation` threw when it
    ///   carries no status.
    public func cancellingOnDisconnect(
        context: some RequestContext, _ operation: () async throws -> some ResponseGenerator & Sendable
    ) async throws -> Response {
        var response: Response
        do {
            response = try await body.consumeWithCancellationOnInboundClose { _ in try await operation() }
                .response(from: self, context: context)
        } catch let error as any HTTPResponseError {
            response = try error.response(from: self, context: context)
        }
        response.headers[.connection] = "close"
        return response
    }
}
