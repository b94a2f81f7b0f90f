// What the cross-process samples name without declaring: a profile and the call that loads it.
// `.ci/samples` compiles those samples (the article on coalescing across processes and the doc
// comments of Sources/CoalescingPostgres) against this module and the `Postgres` trait's build in
// .build-postgres; it re-exports nothing, so each sample imports every module it uses.

/// A profile, as the samples' upstream answers it.
public struct Profile: Codable, Sendable {
    /// The profile's identifier.
    public var id: String
}

/// The samples' upstream.
public struct API: Sendable {
    /// Loads a profile.
    ///
    /// - Parameter id: The profile's identifier.
    /// - Returns: The profile.
    /// - Throws: Nothing here; a real client throws what its transport throws.
    public func fetchProfile(id: String) async throws -> Profile {
        Profile(id: id)
    }
}

/// The samples' upstream client.
public let api = API()
