import Hummingbird
import ServerSupport

/// The service the profile server loads from, standing in for a database or a slow upstream API:
/// `GET /profiles/{id}` answers `{"id": …, "name": …, "load": n}`, where `n` numbers the loads
/// since it started, so that answers from one load are identical and answers from two differ.
///
/// Each load takes `latency`, and, while the upstream holds its answers (``hold()``), waits for
/// ``release()``.
/// A load whose client disconnects is cancelled and counted as such.
public struct ProfileUpstream: Sendable {
    /// Loads started, answered and cancelled; wait on it to see a load reach or leave the upstream.
    public let counts = Watched(UpstreamCounts())
    private let isHolding: Watched<Bool>
    private let latency: Duration

    /// Creates the upstream.
    ///
    /// - Parameters:
    ///   - latency: How long each load takes.
    ///   - holding: Whether loads wait for ``release()`` before they answer.
    public init(latency: Duration = .zero, holding: Bool = false) {
        self.latency = latency
        isHolding = Watched(holding)
    }

    /// Lets every load answer, those waiting and those to come.
    public func release() {
        isHolding.update { $0 = false }
    }

    /// Makes the loads that start from now on wait for ``release()`` again.
    public func hold() {
        isHolding.update { $0 = true }
    }

    /// The upstream's one route.
    public var router: Router<ClientRequestContext> {
        let router = Router(context: ClientRequestContext.self)
        router.get("/profiles/{id}") { _, context in
            let id = try context.parameters.require("id")
            let load = counts.update { counts in
                counts.started += 1
                return counts.started
            }
            do {
                return try await context.cancellingOnDisconnect {
                    try await isHolding.wait { !$0 }
                    try await Task.sleep(for: latency)
                    counts.update { $0.answered += 1 }
                    return ProfileRecord(id: id, name: "Profile \(id)", load: load)
                }
            } catch {
                counts.update { $0.cancelled += 1 }
                throw error
            }
        }
        return router
    }
}

/// A profile as the upstream stores it.
struct ProfileRecord: ResponseEncodable {
    var id: String
    var name: String
    var load: Int
}
