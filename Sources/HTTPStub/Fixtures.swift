import Foundation

extension HTTPStub {
    /// Sample payloads in the shapes the example models decode: a Stack Exchange `questions` page and a user.
    public enum Fixtures {
        /// The path of the Stack Exchange questions endpoint, for use with ``HTTPStub/setRoute(_:_:)``.
        public static let questionsPath = "/2.3/questions"

        /// A path for fetching the user in ``userJSON``.
        public static let userPath = "/users/42"

        /// The number of questions in ``questionsPageJSON``.
        public static let questionsPageItemCount = 4

        /// One page of Stack Exchange questions, with four items and `has_more` set.
        public static let questionsPageJSON = """
            {"items":[\
            {"question_id":1,"title":"How do I coalesce identical concurrent requests?",\
            "link":"https://stackoverflow.com/q/1","score":3,"is_answered":true,"tags":["swift","concurrency"]},\
            {"question_id":2,"title":"Is Operation still useful with async/await?",\
            "link":"https://stackoverflow.com/q/2","score":12,"is_answered":true,"tags":["swift","nsoperation"]},\
            {"question_id":3,"title":"Cancelling a URLSession data task when no caller is left",\
            "link":"https://stackoverflow.com/q/3","score":0,"is_answered":false,"tags":["urlsession","cancellation"]},\
            {"question_id":4,"title":"Why does Swift 6 complain about Sendable closures?",\
            "link":"https://stackoverflow.com/q/4","score":7,"is_answered":true,"tags":["swift","swift6","sendable"]}\
            ],"has_more":true,"quota_max":300,"quota_remaining":297}
            """

        /// ``questionsPageJSON`` as UTF-8 data.
        public static var questionsPage: Data { Data(questionsPageJSON.utf8) }

        /// A user with id 42.
        public static let userJSON = #"{"id":42,"name":"Ada Lovelace","email":"ada@example.com"}"#

        /// ``userJSON`` as UTF-8 data.
        public static var user: Data { Data(userJSON.utf8) }
    }
}
