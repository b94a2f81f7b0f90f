import Foundation

/// The queues the benchmarks use.
public enum Queues {
    /// A concurrent work queue; a suspended one holds its operations pending while callers join.
    public static func work(suspended: Bool) -> OperationQueue {
        let queue = OperationQueue()
        queue.name = "work"
        queue.isSuspended = suspended
        return queue
    }

    /// A serial callback queue, like the main queue a UI app calls back on.
    public static func callbacks(_ index: Int = 0) -> OperationQueue {
        let queue = OperationQueue()
        queue.name = "callbacks \(index)"
        queue.maxConcurrentOperationCount = 1
        return queue
    }

    /// Waits until every queue has run everything added so far, so that no work spills into the
    /// next measured region.
    ///
    /// Waits on a barrier block rather than `waitUntilAllOperationsAreFinished()`: on Linux that
    /// reads each operation's `isFinished` while holding Foundation's lock for the operation, and
    /// the naive operation posts its KVO while holding its own lock, so the two deadlock.
    public static func drain(_ queues: [OperationQueue]) {
        for queue in queues {
            let drained = DispatchSemaphore(value: 0)
            queue.addBarrierBlock {
                drained.signal()
            }
            drained.wait()
        }
    }
}
