import Foundation

/// How far work has got: units completed out of a total, the same for every caller.
public struct WorkProgress: Sendable, Equatable, CustomStringConvertible {
    /// Units done so far.
    public let completed: Int64
    /// Units in all; zero or less while the total is unknown.
    public let total: Int64

    /// Creates a progress of `completed` units out of `total` (zero or less: unknown).
    public init(completed: Int64, total: Int64) {
        self.completed = completed
        self.total = total
    }

    /// Creates a progress from a fraction between 0 and 1, kept in millionths.
    public init(fractionCompleted: Double) {
        self.init(completed: Int64((min(max(fractionCompleted, 0), 1) * 1_000_000).rounded()), total: 1_000_000)
    }

    /// The fraction done, from 0 to 1; nil while the total is unknown.
    public var fractionCompleted: Double? {
        total > 0 ? min(Double(completed) / Double(total), 1) : nil
    }

    /// `3 of 10`, or `3 of unknown`.
    public var description: String {
        "\(completed) of \(total > 0 ? "\(total)" : "unknown")"
    }
}

/// Where task work reports its progress: read ``current`` inside the work a task coalescer runs,
/// and call ``report(progress:)`` as often as the work likes. Keep the reporter to report from
/// callbacks that run outside the work's task, from any thread.
///
/// ```swift
/// let feed = try await coalescer.value(key: "feed", progress: { print("feed:", $0) }) {
///     let progress = ProgressReporter.current
///     progress.report(progress: WorkProgress(completed: 0, total: 2))
///     let feed = try await api.feed()
///     progress.report(progress: WorkProgress(completed: 2, total: 2))
///     return feed
/// }
/// ```
///
/// An operation reports through ``ConcurrentOperation/report(progress:)`` instead.
public struct ProgressReporter: Sendable {
    /// The number of the work the current task runs, as its ``CoalescingEvent``s name it (`work`);
    /// nil outside the work of a task coalescer. A tracer or a logger inside the work tags its
    /// records with it, so that they match the coalescer's events.
    public let work: Int?
    @usableFromInline let sink: (@Sendable (WorkProgress) -> Void)?

    @TaskLocal static var bound: ProgressReporter?

    /// The reporter of the work the current task runs for a task coalescer; elsewhere, one that
    /// reports to nobody.
    public static var current: ProgressReporter { bound ?? ProgressReporter(work: nil, sink: nil) }

    /// Hands `progress` to every caller of the work that asked for it (Guarantees 24 to 27).
    public func report(progress: WorkProgress) {
        sink?(progress)
    }
}

/// One caller's progress: the latest value not yet handed to it, and then, once the work has
/// ended or the caller withdrew, its last call. One thread at a time delivers them, in that
/// order, on the caller's queue: progress never arrives after the result, nor two at once, and a
/// flood of updates leaves at most one value waiting per caller.
@usableFromInline final class Watcher: @unchecked Sendable {
    // @unchecked: `latest`, `last` and `isDelivering` are guarded by the lock of the engine whose
    // work the caller waits for; the rest is immutable.
    /// Where the caller hears: its queue, the main actor, or (neither) the reporting thread.
    let queue: OperationQueue?
    let onMainActor: Bool
    let onProgress: @Sendable (WorkProgress) -> Void
    @usableFromInline var latest: WorkProgress?
    /// The caller's result (or withdrawal), handed over after the last progress.
    @usableFromInline var last: (() -> Void)?
    @usableFromInline var isDelivering = false

    @usableFromInline init(
        queue: OperationQueue?, onMainActor: Bool = false, onProgress: @escaping @Sendable (WorkProgress) -> Void
    ) {
        self.queue = queue
        self.onMainActor = onMainActor
        self.onProgress = onProgress
    }

    /// Sets what is delivered next; returns whether a delivery must start.
    @usableFromInline func hand(progress: WorkProgress? = nil, last: (() -> Void)? = nil) -> Bool {
        if let progress {
            latest = progress
        }
        if let last {
            self.last = last
        }
        let starts = !isDelivering
        isDelivering = true
        return starts
    }

    /// The next thing to deliver, under the engine's lock; nil, and delivery over, when none.
    func next() -> (progress: WorkProgress?, last: (() -> Void)?)? {
        if let progress = latest {
            latest = nil
            return (progress, nil)
        }
        if let last {
            self.last = nil
            return (nil, last)
        }
        isDelivering = false
        return nil
    }
}

extension AnyWork {
    /// Registers the progress of the caller in `slot`, the latest value waiting for it (Guarantee
    /// 25). Under the engine's lock; kept out of line, so that joins without progress stay small.
    @usableFromInline func watch(_ watcher: Watcher, in slot: Int) {
        watchers[slot] = watcher
        watcher.latest = progress
    }
}

extension Work {
    /// Takes the callers that asked for progress out of `callers`, and hands each its result to
    /// deliver after its last progress (Guarantee 24); returns those whose delivery must start.
    /// Under the engine's lock. A task not parked yet finds its watcher when it parks.
    @usableFromInline func serveWatching(from callers: inout Callers<Value>, with result: Result<Value, Error>)
        -> [Watcher]
    {
        watchers.compactMap { slot, watcher in
            let caller = callers.entries[slot]
            if case .task(nil, _) = caller { return nil }
            callers.entries[slot] = .left(.withdrawn)
            return watcher.hand(last: { caller.tell(result) }) ? watcher : nil
        }
    }
}

extension Engine {
    /// Records `progress` as the work's latest and hands it to every caller that asked for it.
    func report(_ progress: WorkProgress, for work: AnyWork<Key>) {
        let starting = state.withLock { _ -> [Watcher] in
            guard work.isInFlight else { return [] }
            work.progress = progress
            return work.watchers.values.filter { $0.hand(progress: progress) }
        }
        starting.forEach(deliver)
    }

    /// Hands a caller that joined late the work's latest progress (Guarantee 25).
    @usableFromInline func deliverLatest(to watcher: Watcher) {
        if state.withLock({ _ in watcher.latest != nil && watcher.hand() }) {
            deliver(watcher)
        }
    }

    /// Delivers what `watcher` holds, on its caller's queue, until nothing is left.
    @usableFromInline func deliver(_ watcher: Watcher) {
        if let queue = watcher.queue {
            queue.addOperation(DeliveryOperation { self.drain(watcher) })
        } else if watcher.onMainActor {
            Task { @MainActor in self.drain(watcher) }
        } else {
            drain(watcher)
        }
    }

    private func drain(_ watcher: Watcher) {
        while let step = state.withLock({ _ in watcher.next() }) {
            if let progress = step.progress {
                watcher.onProgress(progress)
            }
            step.last?()
        }
    }
}
