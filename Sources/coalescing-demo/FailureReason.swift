import CoalescingOperations
import Examples
import Foundation

/// How a caller's request ended, as the summary counts it.
enum CallerOutcome: Sendable {
    case served
    /// `serverAnswered`: a response came back (a bad status or body), rather than none at all.
    case failed(reason: String, serverAnswered: Bool)
    case cancelled

    init(_ result: Result<some Any, Error>) {
        switch result {
        case .success: self = .served
        // The work cancelled for everyone, or the caller withdrawn: either way, not served.
        case .failure(CoalescingError.cancelled): self = .cancelled
        case .failure(is CancellationError): self = .cancelled
        case .failure(let error): self = .failed(reason: Self.reason(error), serverAnswered: error is NetworkingError)
        }
    }

    /// One line that says what went wrong, instead of Foundation's multi-line `NSError` dump.
    static func reason(_ error: Error) -> String {
        switch error {
        case let error as NetworkingError:
            return error.description
        case let error as URLError:
            switch error.code {
            case .cannotConnectToHost: return "could not connect to the server (is it running?)"
            case .cannotFindHost: return "no such host"
            case .timedOut: return "the request timed out"
            case .networkConnectionLost: return "the connection was lost"
            case .notConnectedToInternet: return "not connected to the network"
            case .badServerResponse: return "the server's response was not HTTP"
            default: return "URL error \(error.code.rawValue)"
            }
        default:
            return String(describing: error).split(whereSeparator: \.isNewline).joined(separator: " ")
        }
    }
}
