import Foundation

// An operation's life as Foundation sees it: started, executing, finished, and the KVO that tells
// its queue. A result goes from ConcurrentOperation.swift or CoalescibleOperation.swift into the
// engine, which finishes the operations through these: in a file of their own, that path never
// comes back into a file it left.

/// An operation's life as Foundation sees it. The result is decided once; the lifecycle reaches
/// `.finished` only once the result is decided *and* the queue has started the operation, since
/// an operation that reports finished before its queue started it corrupts the queue.
@usableFromInline enum Lifecycle: Equatable {
    /// Not started. `onQueue` once it was handed to a queue through the library, so that it is
    /// never added twice.
    case idle(onQueue: Bool)
    /// Started by its queue (or by hand), its result not yet decided.
    case executing
    /// Started, its result decided: finished once Foundation has been told.
    case finishing
    /// Its result was decided before its queue started it: `start()` finishes it without calling
    /// `main()`.
    case decidedBeforeStart(onQueue: Bool)
    case finished
}

extension Lifecycle {
    /// Claims an operation that is on no queue for one, so that it is never added twice: true if
    /// the queue will run it, false if its result was decided before it was enqueued (the queue
    /// then finishes it at once, so that operations depending on it do not wait forever), nil if
    /// it must not be added to a queue. Under the operation's lock.
    @inlinable mutating func claimForQueue() -> Bool? {
        switch self {
        case .idle(onQueue: false):
            self = .idle(onQueue: true)
            return true
        case .decidedBeforeStart(onQueue: false):
            self = .decidedBeforeStart(onQueue: true)
            return false
        case .idle, .executing, .finishing, .decidedBeforeStart, .finished:
            return nil
        }
    }
}

extension ConcurrentOperation {
    /// Foundation's own `cancel()`: sets `isCancelled`.
    @usableFromInline final func cancelInFoundation() { super.cancel() }

    /// The result is decided: a running operation finishes now, one its queue has yet to start
    /// finishes when it does. Inlinable, like ``CoalescibleOperation/finishJoined()``: compiled
    /// unspecialized, the handler it returns through the lock's generic closure was wrapped in a
    /// reabstraction thunk, an allocation per operation. Returns the completion handler to call,
    /// let go of by the operation, if this call decided the result and the operation still held
    /// one.
    @inlinable @discardableResult final func resultDecided() -> Handler? {
        // `unqueued`: decided before any queue started it, and on none. The handler comes out
        // through a local, not the lock's generic result, which wrapped it in reabstraction thunks.
        var handler: Handler?
        let (finishing, unqueued) = lifecycle.withLock { lifecycle -> (Bool, Bool) in
            switch lifecycle {
            case .idle(let onQueue):
                lifecycle = .decidedBeforeStart(onQueue: onQueue)
                handler = takeCompletionHandler()
                return (false, !onQueue)
            case .executing:
                lifecycle = .finishing
                handler = takeCompletionHandler()
                return (true, false)
            case .decidedBeforeStart(let onQueue):
                return (false, !onQueue)
            case .finishing, .finished:
                return (false, false)
            }
        }
        if finishing {
            postingChanges(to: ["isExecuting", "isFinished"]) { lifecycle.withLock { $0 = .finished } }
        }
        // An operation that finishes without running must stop waiting on its dependencies before
        // it is let go of: swift-corelibs-foundation keeps a dependency's dependents unretained,
        // and the dependency finishing later would reach a freed operation. Foundation unregisters
        // under the dependency's lock, the one under which a finishing dependency picks its
        // dependents, so no dependency reaches the operation afterwards. (An operation its queue
        // ran had its dependencies finish first; one on a queue is released when the queue
        // starts it.)
        if unqueued { releaseDependencies() }
        return handler
    }

    /// Lets go of the completion handler, after (or for) its one call. Under `lifecycle`'s lock.
    @inlinable final func takeCompletionHandler() -> Handler? {
        let handler = completionHandler
        completionHandler = nil
        return handler
    }

    /// Stops waiting on its dependencies: see ``resultDecided()`` for why.
    @usableFromInline final func releaseDependencies() {
        for dependency in dependencies { removeDependency(dependency) }
    }

    /// Wraps a lifecycle change in KVO notifications, posted with no lock held: Foundation reads
    /// the properties back synchronously, and a thread waiting in
    /// `waitUntilAllOperationsAreFinished()` holds Foundation's lock while it reads `isFinished`.
    ///
    /// On Linux, Foundation reacts to `didChangeValue(forKey:)` for exactly these names; any other
    /// key, such as a custom `state`, goes unseen and jams the queue.
    @usableFromInline final func postingChanges<Result>(to keys: [String], _ change: () -> Result) -> Result {
        for key in keys { willChangeValue(forKey: key) }
        let result = change()
        for key in keys.reversed() { didChangeValue(forKey: key) }
        return result
    }
}
