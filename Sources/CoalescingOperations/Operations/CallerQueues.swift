import Foundation

/// Whether all of an operation's callers share one callback queue, so that the result can reach
/// them as one list in one hop, without sorting them by queue.
@usableFromInline
enum CallerQueues {
    case none
    /// Every caller so far is a handler on this queue (nil: called on the finishing thread).
    case one(OperationQueue?)
    /// Callers on several queues, or absorbed operations with callers of their own.
    case several

    /// Accounts for a handler caller on `queue`.
    @inlinable
    mutating func add(_ queue: OperationQueue?) {
        switch self {
        case .none: self = .one(queue)
        case .one(let shared) where shared === queue: break
        case .one, .several: self = .several
        }
    }
}
