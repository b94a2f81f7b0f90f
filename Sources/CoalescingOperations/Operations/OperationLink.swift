import Foundation

// How a coalescible operation is tied to the work an engine holds: taken by a manager to run it or
// to join it, let go of once its result is decided, written to when its callers' priority moves.
// The engine calls these. The operation's own ways in (finish, cancel, report) are in
// CoalescibleOperation.swift and ConcurrentOperation.swift, so that the path of a result, which
// starts there, goes on into the engine and out to here without coming back into a file it left.

extension CoalescibleOperation {
    /// Where the operation's result is decided.
    @usableFromInline enum Link {
        /// Nobody has taken it: a manager may, to run or join work.
        case fresh
        /// Decided by itself, as a plain operation, before anyone took it.
        case alone
        /// Runs `work`, held by `engine`.
        case runs(Engine<OperationKey>, Work<OperationKey, Value>)
        /// Joined `work` as the caller in `slot`: it never runs, and finishes when it hears.
        case joined(Engine<OperationKey>, Work<OperationKey, Value>, slot: Int)
        /// Ran work whose result was decided: only Foundation still hears of a `cancel()`.
        case ended
    }

    /// Hands the operation to `engine`, as the runner of `work` or (`slot`) a caller of it, if it
    /// is fresh: nobody took it, and it was neither started nor decided; what else that does
    /// depends on the `taker`. Under the engine's lock; an operation's lock is only ever taken
    /// inside it.
    @inlinable final func take(
        _ work: Work<OperationKey, Value>, of engine: Engine<OperationKey>, slot: Int?, for taker: Taker
    ) -> Taking<OperationKey, Value> {
        // Looked at and claimed in one turn of the operation's lock.
        lifecycle.withLock { lifecycle -> Taking<OperationKey, Value> in
            if case .fresh = link, case .idle(onQueue: false) = lifecycle {
                lifecycle = .idle(onQueue: taker != .adoption)
                if let slot {
                    link = .joined(engine, work, slot: slot)
                    return .joins
                }
                link = .runs(engine, work)
                let own = takeCompletionHandler()
                guard let own else { return .runs(own: nil) }
                return .runs(own: .handler(own, queue: callBackQueue))
            }
            guard taker == .manager else { return .refused(nil, runs: false) }
            let claimed = lifecycle.claimForQueue()
            if let runs = claimed { return .unqueued(runs: runs) }
            switch link {
            case .runs(let owner, let work): return .refused(owner === engine ? work : nil, runs: true)
            case .joined(let owner, let work, _): return .refused(owner === engine ? work : nil, runs: false)
            case .fresh, .alone, .ended: return .refused(nil, runs: false)
            }
        }
    }

    /// The operation joined work and has heard: it lets go of the work and finishes without
    /// running, once, and returns its completion handler, let go of too, to call with what it heard.
    @inlinable final func finishJoined() -> Handler? {
        // The handler comes out through a local, not the lock's generic result: returned through
        // it, it was wrapped in two reabstraction thunks, two allocations per joined operation.
        var handler: Handler?
        let finished = lifecycle.withLock { lifecycle in
            link = .ended
            handler = takeCompletionHandler()
            return lifecycle == .finished
        }
        guard !finished else { return handler }
        releaseDependencies()
        postingChanges(to: ["isFinished"]) { lifecycle.withLock { $0 = .finished } }
        return handler
    }

    /// Its work's result was decided: its `cancel()` no longer goes to the engine.
    @usableFromInline final func unlink() { lifecycle.withLock { _ in link = .ended } }

    /// Writes the priority the work's callers ask for; see ``Engine/applyPriority(of:)``.
    final func write(_ priority: OperationPriority) {
        super.queuePriority = priority.queuePriority
        super.qualityOfService = priority.qualityOfService
    }
}

/// Who takes a coalescible operation, and so what taking it does. A `manager` admitting it takes
/// a fresh operation for its queue, and still hands one that is not fresh to that queue if it is
/// on none. The deprecated hand-join (`handJoin`), joining it to another operation's work, takes
/// it as if queued; the engine of its own that adopts an operation others join by hand
/// (`adoption`) takes it for no queue: in both, the app enqueues it.
@usableFromInline enum Taker {
    case manager, handJoin, adoption
}
