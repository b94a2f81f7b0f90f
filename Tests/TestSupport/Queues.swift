import Foundation

/// Small factories for the queues tests use.
public enum Queues {
    /// A serial queue, suspended if asked: nothing starts until `isSuspended = false`.
    public static func serial(_ name: String, suspended: Bool = false) -> OperationQueue {
        let queue = OperationQueue()
        queue.name = name
        queue.maxConcurrentOperationCount = 1
        queue.isSuspended = suspended
        return queue
    }

    /// A concurrent queue, suspended if asked.
    public static func concurrent(_ name: String, suspended: Bool = false) -> OperationQueue {
        let queue = OperationQueue()
        queue.name = name
        queue.isSuspended = suspended
        return queue
    }
}
