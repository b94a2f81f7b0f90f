// What the server article's samples name without declaring: the app's model and its load, no
// more. `.ci/samples` compiles those samples against this module and the server example's
// modules; it re-exports nothing, so each sample imports every module it uses.

import Hummingbird

/// A profile, as the samples' server answers it.
public struct Profile: ResponseCodable, Sendable {
    /// The profile's identifier.
    public var id: String
    /// The profile's display name.
    public var name: String
}

/// The samples' database or upstream call.
///
/// - Parameter id: The profile's identifier.
/// - Returns: The profile.
/// - Throws: Nothing here; a real load throws what its database or client throws.
public func loadProfile(id: String) async throws -> Profile {
    Profile(id: id, name: "Ada Lovelace")
}
