import CoalescingOperations
import Hummingbird
import ServerSupport

/// The server's routes: `GET /profiles/{id}`, coalesced through `loader`, and `GET /statistics`,
/// the coalescer's counts on one line.
///
/// A request whose client disconnects withdraws from the load at once: Hummingbird cancels no
/// handler by default, so the load runs inside `ClientRequestContext.cancellingOnDisconnect`,
/// which learns of the disconnect from the connection's events and keeps connections alive. A
/// request whose timeout passes answers 504; one whose upstream fails answers 502.
///
/// - Parameter loader: The application's one loader of profiles.
/// - Returns: The router, with a tracing middleware that gives each request a span.
public func makeRouter(loader: ProfileLoader) -> Router<ClientRequestContext> {
    let router = Router(context: ClientRequestContext.self)
    router.add(middleware: TracingMiddleware())
    router.get("/profiles/{id}") { _, context in
        let id = try context.parameters.require("id")
        return try await context.cancellingOnDisconnect {
            do {
                return try await loader.profile(id: id)
            } catch CoalescingError.timedOut {
                throw HTTPError(.gatewayTimeout, message: "The profile took too long to load.")
            } catch is UpstreamError {
                throw HTTPError(.badGateway, message: "The profile service failed.")
            }
        }
    }
    router.get("/statistics") { _, _ in
        loader.statistics.description
    }
    return router
}
