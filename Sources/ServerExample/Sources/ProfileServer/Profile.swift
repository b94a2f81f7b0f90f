import Hummingbird

/// A profile, as the upstream sends it and the server answers it.
public struct Profile: ResponseCodable, Sendable, Equatable {
    /// The profile's identifier.
    public var id: String
    /// The profile's display name.
    public var name: String
    /// Which of the upstream's loads produced it: callers served by one load see one number.
    public var load: Int

    /// Creates a profile.
    ///
    /// - Parameters:
    ///   - id: The profile's identifier.
    ///   - name: The profile's display name.
    ///   - load: Which of the upstream's loads produced it.
    public init(id: String, name: String, load: Int) {
        self.id = id
        self.name = name
        self.load = load
    }
}
