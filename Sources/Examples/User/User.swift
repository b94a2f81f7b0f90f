/// The signed-in user, as the app's user endpoint returns it.
public struct User: Codable, Equatable, Sendable {
    /// The user's identifier.
    public let id: Int
    /// The user's display name.
    public let name: String
    /// The user's email address.
    public let email: String

    /// Creates a user.
    public init(id: Int, name: String, email: String) {
        self.id = id
        self.name = name
        self.email = email
    }
}
