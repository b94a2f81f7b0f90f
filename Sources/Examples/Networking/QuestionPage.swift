/// One page of the Stack Exchange `questions` endpoint.
public struct QuestionPage: Decodable, Equatable, Sendable {
    /// The questions on this page.
    public let items: [Question]
    /// Whether another page follows (`has_more`).
    public let hasMore: Bool

    private enum CodingKeys: String, CodingKey {
        case items
        case hasMore = "has_more"
    }
}
