import CoalescingOperations
import Foundation

/// A coalescible operation whose work is a closure, counting how often its work started.
public final class TestOperation<Value: Sendable>: CoalescibleOperation<Value>, @unchecked Sendable {
    // @unchecked: adds only immutable properties to CoalescibleOperation.
    private let work: @Sendable (TestOperation<Value>) -> Void
    private let starts: Counter?
    private let policy: AbandonedWorkPolicy

    /// - Parameters:
    ///   - identifier: The operation's identifier.
    ///   - callBackQueue: Where `completionHandler` runs.
    ///   - starts: Incremented each time any operation sharing it starts its work.
    ///   - policy: What happens to the work when its last caller withdraws.
    ///   - work: Runs as `main()`; must end in `finish(result:)`, now or later.
    ///   - completionHandler: The operation's caller.
    public init(
        _ identifier: String = "work",
        callBackQueue: OperationQueue,
        starts: Counter? = nil,
        policy: AbandonedWorkPolicy = .cancel,
        work: @escaping @Sendable (TestOperation<Value>) -> Void,
        completionHandler: @escaping @Sendable (Result<Value, Error>) -> Void
    ) {
        self.work = work
        self.starts = starts
        self.policy = policy
        super.init(identifier: identifier, callBackQueue: callBackQueue, completionHandler: completionHandler)
    }

    /// An operation with no caller of its own.
    public init(
        _ identifier: String = "work", starts: Counter? = nil, policy: AbandonedWorkPolicy = .cancel,
        work: @escaping @Sendable (TestOperation<Value>) -> Void
    ) {
        self.work = work
        self.starts = starts
        self.policy = policy
        super.init(identifier: identifier)
    }

    /// Work that finishes at once with `value`; its own caller is `caller` in `recorder`.
    public convenience init(
        _ identifier: String = "work", finishingWith value: Value, callBackQueue: OperationQueue,
        starts: Counter? = nil, recorder: ResultRecorder<Value>, caller: String
    ) {
        self.init(
            identifier, callBackQueue: callBackQueue, starts: starts, work: { $0.finish(result: .success(value)) },
            completionHandler: recorder.handler(caller))
    }

    /// The policy given at creation.
    public override var abandonedWorkPolicy: AbandonedWorkPolicy { policy }

    public override func main() {
        starts?.increment()
        work(self)
    }
}

/// Work that opens `started` when it starts, then finishes with `value()` from another thread once
/// `release` opens: the way tests hold work in flight without sleeping. The tests' one held work:
/// it counts in `sawCancellation` a release that finds the operation cancelled, and opens `ended`
/// once it has finished.
public func heldWork<Value: Sendable>(
    release: Gate, started: Gate? = nil, sawCancellation: Counter? = nil, ended: Gate? = nil,
    value: @escaping @Sendable () -> Value
) -> @Sendable (TestOperation<Value>) -> Void {
    { operation in
        started?.open()
        DispatchQueue.global().async {
            _ = release.wait()
            if operation.isCancelled { sawCancellation?.increment() }
            operation.finish(result: .success(value()))
            ended?.open()
        }
    }
}
