import Foundation

/// A question, as the Stack Exchange `questions` endpoint describes it.
public struct Question: Decodable, Equatable, Identifiable, Sendable {
    /// The question's identifier (`question_id`).
    public let id: Int
    /// The question's title.
    public let title: String
    /// The question's page.
    public let link: URL
    /// Votes up minus votes down.
    public let score: Int
    /// Whether the question has an accepted or upvoted answer (`is_answered`).
    public let isAnswered: Bool
    /// The question's tags.
    public let tags: [String]

    private enum CodingKeys: String, CodingKey {
        case id = "question_id"
        case title, link, score
        case isAnswered = "is_answered"
        case tags
    }
}
