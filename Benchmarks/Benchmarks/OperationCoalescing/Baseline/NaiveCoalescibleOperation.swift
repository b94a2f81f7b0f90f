import Foundation

/// The coalescible operation users copy from the blog posts (seeds 000 and 003), kept naive on
/// purpose so the benchmarks can compare against it.
///
/// What makes it naive, and is kept as is:
/// - its state is an enum guarded by an `NSRecursiveLock`, and every change posts
///   `willChange`/`didChange` for both the old and the new key while the lock is held;
/// - ``coalesce(operation:)`` nests completion closures: each joining caller wraps the previous
///   handler in a new closure that calls it and then hops to the caller's queue with one
///   `addOperation` of its own. The chain is as deep as the number of callers, both when it runs
///   and when it is released.
///
/// Known bugs, kept as they are:
/// - cancelling or finishing an operation before its queue started it reports `isFinished` to a
///   queue that never started it (swift-corelibs-foundation then unlinks it from only one of its
///   two lists, and may free it while still linked);
/// - KVO is posted while `lock` is held, and `waitUntilAllOperationsAreFinished()` reads
///   `isFinished` while holding Foundation's lock for the operation: the two deadlock (it happened
///   while these benchmarks were written);
/// - the chain of nested handlers overflows the stack: 100,000 callers crash on an 8 MB stack.
///
/// The benchmarks steer clear of all three rather than fix them: they never cancel a naive
/// operation or finish one before its queue started it, they wait for queues with barrier blocks,
/// and they keep naive callers at or below 10,000 (see BENCHMARKS.md).
///
/// Ported to Swift 6 as a user would: `Value` is `Sendable` and handlers are `@Sendable`, because
/// `OperationQueue.addOperation(_:)` takes a `@Sendable` block and the result crosses queues in it.
class NaiveCoalescibleOperation<Value: Sendable>: Operation, @unchecked Sendable {
    // @unchecked: `_state` and `completionHandler` are only read or written while `lock` is held
    // (except the final read of `completionHandler` on the callback queue, after the operation has
    // finished and can no longer be coalesced: the blog's code does the same).

    /// Operations with equal identifiers (and the same `Value`) do the same work.
    let identifier: String

    /// The queue the completion handler is called on.
    let callBackQueue: OperationQueue

    /// The caller's handler; coalescing replaces it with a closure that also calls the newcomer's.
    private(set) var completionHandler: @Sendable (Result<Value, Error>) -> Void

    /// Recursive because the KVO notifications posted under it read the state back on this thread.
    private let lock = NSRecursiveLock()

    private enum State: String {
        case ready = "isReady"
        case executing = "isExecuting"
        case finished = "isFinished"
    }

    private var _state = State.ready {
        willSet {
            willChangeValue(forKey: newValue.rawValue)
            willChangeValue(forKey: _state.rawValue)
        }
        didSet {
            didChangeValue(forKey: oldValue.rawValue)
            didChangeValue(forKey: _state.rawValue)
        }
    }

    private var state: State {
        get {
            lock.lock()
            defer { lock.unlock() }
            return _state
        }
        set {
            lock.lock()
            defer { lock.unlock() }
            _state = newValue
        }
    }

    init(
        identifier: String,
        callBackQueue: OperationQueue = OperationQueue.current ?? .main,
        completionHandler: @escaping @Sendable (Result<Value, Error>) -> Void
    ) {
        self.identifier = identifier
        self.callBackQueue = callBackQueue
        self.completionHandler = completionHandler
        super.init()
    }

    // MARK: Lifecycle

    override var isReady: Bool { super.isReady && state == .ready }
    override var isExecuting: Bool { state == .executing }
    override var isFinished: Bool { state == .finished }
    override var isAsynchronous: Bool { true }

    override func start() {
        guard !isCancelled else {
            finish(result: .failure(NaiveCoalescingError.cancelled))
            return
        }
        state = .executing
        main()
    }

    /// Finishes the operation and sends `result` to the (nested) completion handler.
    func finish(result: Result<Value, Error>) {
        lock.lock()
        defer { lock.unlock() }
        guard !isFinished else { return }
        state = .finished
        callBackQueue.addOperation {
            self.completionHandler(result)
        }
    }

    override func cancel() {
        super.cancel()
        finish(result: .failure(NaiveCoalescingError.cancelled))
    }

    // MARK: Coalescing

    /// Makes `operation`'s caller a caller of this operation by nesting its handler in ours.
    ///
    /// - Returns: False if this operation already finished.
    @discardableResult
    func coalesce(operation: NaiveCoalescibleOperation<Value>) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard !isFinished else { return false }
        let initialCompletionHandler = completionHandler
        let additionalCompletionHandler = operation.completionHandler
        let additionalCallBackQueue = operation.callBackQueue
        completionHandler = { result in
            initialCompletionHandler(result)
            additionalCallBackQueue.addOperation {
                additionalCompletionHandler(result)
            }
        }
        return true
    }
}
