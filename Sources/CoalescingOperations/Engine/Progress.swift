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

    /// Creates a progress from a fraction, kept in millionths and clamped to 0...1: below 0 (and
    /// NaN) is 0, above 1 (and infinity) is 1.
    public init(fractionCompleted: Double) {
        let clamped = fractionCompleted.isNaN ? 0 : min(max(fractionCompleted, 0), 1)
        self.init(completed: Int64((clamped * 1_000_000).rounded()), total: 1_000_000)
    }

    /// The fraction done, clamped to 0...1: `completed` below 0 counts as 0, above `total` as
    /// `total`. Nil while the total is unknown.
    public var fractionCompleted: Double? {
        total > 0 ? min(max(Double(completed) / Double(total), 0), 1) : nil
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

/// Where one caller hears progress: its callback queue, the main actor, or (neither) the
/// thread that reports.
@usableFromInline struct ProgressSink: Sendable {
    let queue: OperationQueue?
    let onMainActor: Bool
    let onProgress: @Sendable (WorkProgress) -> Void

    @usableFromInline init(
        queue: OperationQueue?, onMainActor: Bool = false, onProgress: @escaping @Sendable (WorkProgress) -> Void
    ) {
        (self.queue, self.onMainActor, self.onProgress) = (queue, onMainActor, onProgress)
    }
}
