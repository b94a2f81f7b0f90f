import Foundation

/// An operation's life as Foundation sees it, and the work it belongs to.
///
/// The callers, the result, the priority and the statistics live in the engine; an operation
/// keeps only what Foundation needs (has its queue started it, has it finished) and where its
/// result is decided. Two things happen apart, because Foundation forbids tying them together:
/// the result is decided once, in the engine; the lifecycle reaches `.finished` only once that
/// result has been handed out *and* the queue has started the operation, since an operation that
/// reports finished before its queue started it corrupts the queue.
///
/// Each transition runs under the operation's own lock, which is only ever taken after the
/// engine's, never before it.
@usableFromInline enum Lifecycle<Value: Sendable> {
    /// Not started. `onQueue` once a manager (or `enqueue(_:)`) added it to a queue, so that it is
    /// never added twice. A fresh operation is `.idle(.own(handler), onQueue: false)`.
    case idle(Link, onQueue: Bool)
    /// Started by its queue (or by hand), its result not yet handed out.
    case executing(Link)
    /// Absorbed into other work as the caller in `slot`: it never runs, and finishes when served.
    /// `own` is its completion handler, served with the work's result.
    case riding(Engine<OperationKey>, Work<OperationKey, Value>, slot: Int, own: Caller<Value>?)
    /// Its result was handed out before its queue started it: `start()` finishes it without
    /// calling `main()`.
    case decidedBeforeStart(onQueue: Bool)
    case finished

    /// Where an operation's result is decided.
    @usableFromInline enum Link {
        /// By the operation itself, for its own caller, if any: an operation on a queue of the
        /// app's, or not yet enqueued.
        case own(Caller<Value>?)
        /// In `engine`, as the runner of `work`; `slot` holds the operation's own caller.
        case work(Engine<OperationKey>, Work<OperationKey, Value>, slot: Int?)
    }

    /// Hands a fresh operation (nobody has taken it) to a manager: moves it to `taken(own)` and
    /// returns its own caller, or nil, untouched, when it is not fresh.
    @inlinable mutating func take(_ taken: (Caller<Value>?) -> Lifecycle) -> Caller<Value>?? {
        guard case .idle(.own(let own), onQueue: false) = self else { return nil }
        self = taken(own)
        return .some(own)
    }
}

extension ConcurrentOperation {
    /// The engine handed out the result of the work this operation runs.
    @usableFromInline final func workEnded() {
        let finishing = lifecycle.withLock { lifecycle -> Bool in
            switch lifecycle {
            case .idle(.work, let onQueue):
                lifecycle = .decidedBeforeStart(onQueue: onQueue)
                return false
            case .executing(.work):
                return true
            case .idle(.own, _), .executing(.own), .riding, .decidedBeforeStart, .finished:
                return false
            }
        }
        if finishing {
            postingChanges(to: ["isExecuting", "isFinished"]) { lifecycle.withLock { $0 = .finished } }
        }
        releaseDependenciesIfUnqueued()
    }

    /// Ends an absorbed operation's ride: it finishes, and returns its own handler to serve.
    @usableFromInline final func finishRide() -> Caller<Value>? {
        guard
            let own = lifecycle.withLock({ lifecycle -> Caller<Value>?? in
                guard case .riding(_, _, _, let own) = lifecycle else { return nil }
                return .some(own)
            })
        else { return nil }
        releaseDependencies()
        postingChanges(to: ["isFinished"]) { lifecycle.withLock { $0 = .finished } }
        return own
    }

    /// Claims an operation that is on no queue for one, so that it is never added twice: true if
    /// the queue will run it (fresh, or carrying operations it absorbed by hand, which run as
    /// work of their own), false if its result was decided before it was enqueued (the queue then
    /// finishes it at once, so that operations depending on it do not wait forever), nil if it
    /// must not be added to a queue.
    @usableFromInline final func claimForQueue() -> Bool? {
        lifecycle.withLock { lifecycle in
            switch lifecycle {
            case .idle(let link, onQueue: false):
                lifecycle = .idle(link, onQueue: true)
                return true
            case .decidedBeforeStart(onQueue: false):
                lifecycle = .decidedBeforeStart(onQueue: true)
                return false
            case .idle, .executing, .riding, .decidedBeforeStart, .finished:
                return nil
            }
        }
    }

    /// Writes the priority the work's callers ask for; see ``Engine/applyPriority(of:)``.
    final func write(_ priority: OperationPriority) {
        super.queuePriority = priority.queuePriority
        super.qualityOfService = priority.qualityOfService
    }

    /// An operation that finishes without running must stop waiting on its dependencies before it
    /// is let go of: swift-corelibs-foundation keeps a dependency's dependents unretained, and the
    /// dependency finishing later would reach a freed operation. Foundation unregisters under the
    /// dependency's lock, the one under which a finishing dependency picks its dependents, so no
    /// dependency reaches the operation afterwards. (An operation its queue ran had its
    /// dependencies finish first.)
    final func releaseDependenciesIfUnqueued() {
        if lifecycle.withLock({ if case .decidedBeforeStart(onQueue: false) = $0 { true } else { false } }) {
            releaseDependencies()
        }
    }

    final func releaseDependencies() {
        for dependency in dependencies {
            removeDependency(dependency)
        }
    }

    /// Wraps a lifecycle change in KVO notifications, posted with no lock held: Foundation reads
    /// the properties back synchronously, and a thread waiting in
    /// `waitUntilAllOperationsAreFinished()` holds Foundation's lock while it reads `isFinished`.
    ///
    /// On Linux, Foundation reacts to `didChangeValue(forKey:)` for exactly these names; any other
    /// key, such as a custom `state`, goes unseen and jams the queue.
    final func postingChanges<Result>(to keys: [String], _ change: () -> Result) -> Result {
        for key in keys {
            willChangeValue(forKey: key)
        }
        let result = change()
        for key in keys.reversed() {
            didChangeValue(forKey: key)
        }
        return result
    }
}
