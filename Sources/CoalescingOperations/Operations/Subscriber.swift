import Foundation

/// One caller waiting for an operation's result.
@usableFromInline
enum Subscriber<Value> {
    /// A completion handler, called on `queue`, or on the finishing thread when `queue` is nil.
    case handler((Result<Value, Error>) -> Void, queue: OperationQueue?)

    /// An operation absorbed into the one holding this subscriber: when the work ends, the
    /// absorbed operation finishes with the same result and serves its own callers.
    case operation(ConcurrentOperation<Value>)
}
