import CoalescingOperations
import Foundation

/// Every manager the launch creates, and what the library reports about them: the figures of the
/// summary come from here, not from the demo's own counting.
final class Coalescers: @unchecked Sendable {
    // @unchecked: every mutable property is guarded by `lock`; `printsEvents` and `start` are `let`.
    private let lock = NSLock()
    private let printsEvents: Bool
    private let start = ContinuousClock.now

    /// - Parameter printsEvents: Whether to print each event as the library reports it.
    init(printsEvents: Bool = false) {
        self.printsEvents = printsEvents
    }
    private var managers: [OperationQueueManager] = []
    /// What the events call an identifier, when it has a shorter name than itself.
    private var names: [String: String] = [:]
    private var servedByOutcome: [WorkOutcome: Int] = [:]

    /// A new manager on `queue`, whose statistics and events count towards the summary.
    func makeManager(queue: OperationQueue) -> OperationQueueManager {
        // The events say how the work each caller was handed ended; the statistics count the
        // rest. The observer only adds to a dictionary, as quick as an observer must be.
        let manager = OperationQueueManager(queue: queue) { [weak self] event in
            if self?.printsEvents == true, let self {
                let elapsed = (ContinuousClock.now - self.start).components
                let milliseconds = elapsed.seconds * 1000 + elapsed.attoseconds / 1_000_000_000_000_000
                let name = { key in self.lock.withLock { self.names[key] } ?? key }
                print(String(format: "%6d ms  event  ", milliseconds) + Self.describe(event, name: name))
            }
            if case .workEnded(_, _, let outcome, _, let callersServed, _) = event {
                self?.lock.withLock { self?.servedByOutcome[outcome, default: 0] += callersServed }
            }
        }
        lock.withLock { managers.append(manager) }
        return manager
    }

    /// Names `identifier` in the events printed: an HTTP request's identifier is its whole key,
    /// and its description (`GET http://… [accept]`) says the same in fewer words.
    func name(_ identifier: String, _ name: String) {
        lock.withLock { names[identifier] = name }
    }

    /// One line for `event`, its key as `name` calls it.
    static func describe(_ event: CoalescingEvent<String>, name: (String) -> String = { $0 }) -> String {
        switch event {
        case .workStarted(let key, _): "work started     \(name(key))"
        case .callerJoined(let key, _, let callers): "caller joined    \(name(key)) (\(callers) waiting)"
        case .callerWithdrawn(let key, _, let reason): "caller withdrew  \(name(key)) (\(reason))"
        case .priorityChanged(let key, _, let priority): "priority changed \(name(key)) (\(priority))"
        case .workEnded(let key, _, let outcome, _, let served, let duration):
            "work ended       \(name(key)): \(outcome), \(served) caller(s) served after \(duration)"
        case .workStalled(let key, _, let callers, let elapsed):
            "work stalled     \(name(key)): \(callers) caller(s) waiting for \(elapsed)"
        }
    }

    /// The statistics of every manager, added up: without coalescing, each caller has its own.
    var statistics: Totals {
        lock.withLock { managers }.reduce(into: Totals()) { totals, manager in totals.add(manager.statistics) }
    }

    /// Returns once every ended work's event has reached the observer. Statistics are counted
    /// before callers are called back, but an event can still be on its way then, delivered by
    /// another thread that was already delivering events of the same manager.
    func eventsDelivered() async {
        let deadline = ContinuousClock.now + .seconds(1)
        while lock.withLock({ servedByOutcome.values.reduce(0, +) }) < statistics.callersServed,
            ContinuousClock.now < deadline
        {
            await Task.yield()
        }
    }

    /// Callers handed the outcome of work that ended so.
    func callersServed(_ outcome: WorkOutcome) -> Int {
        lock.withLock { servedByOutcome[outcome, default: 0] }
    }

    /// The fields of `CoalescingStatistics` that the summary needs, added up over managers.
    struct Totals {
        var workStarted = 0
        var callersJoined = 0
        var callersWithdrawn = 0
        var callersTimedOut = 0
        var callersServed = 0
        var callersSaved = 0

        mutating func add(_ statistics: CoalescingStatistics) {
            workStarted += statistics.workStarted
            callersJoined += statistics.callersJoined
            callersWithdrawn += statistics.callersWithdrawn
            callersTimedOut += statistics.callersTimedOut
            callersServed += statistics.callersServed
            callersSaved += statistics.callersJoined
        }
    }
}
