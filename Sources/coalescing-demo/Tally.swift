import Foundation

/// What only the demo can know: which request each caller made and why it failed, the requests
/// it sent, and how long they took. The counts of callers and work come from the library.
final class Tally: @unchecked Sendable {
    // @unchecked: every property is guarded by `lock`.
    private let lock = NSLock()
    private var outcomes: [(caller: String, request: String, outcome: CallerOutcome)] = []
    private var requests: [String] = []
    private var started: Set<String> = []
    private var waits: [String: Duration] = [:]
    private var prefetchConsumers = 0

    /// A caller's outcome, and how long it waited for it.
    func record(_ caller: String, request: String, _ outcome: CallerOutcome, after elapsed: Duration?) {
        lock.withLock {
            outcomes.append((caller, request, outcome))
            switch outcome {
            case .served, .failed(_, serverAnswered: true): waits[caller] = elapsed
            case .failed, .cancelled: break
            }
        }
    }

    /// A caller served by the prefetcher from a stored result, without work of its own.
    func servedFromPrefetch(_ caller: String) {
        lock.withLock { prefetchConsumers += 1 }
    }

    /// A caller that started work rather than joining it.
    func startedWork(_ caller: String) {
        lock.withLock { _ = started.insert(caller) }
    }

    func requestSent(_ description: String) {
        lock.withLock { requests.append(description) }
    }

    var callerOutcomes: [(caller: String, request: String, outcome: CallerOutcome)] { lock.withLock { outcomes } }
    var requestsSent: [String] { lock.withLock { requests } }
    func hasStartedWork(_ caller: String) -> Bool { lock.withLock { started.contains(caller) } }
    var servedFromPrefetch: Int { lock.withLock { prefetchConsumers } }
    /// How long each answered request took: the waits of the callers that started work.
    var responseDurations: [Duration] { lock.withLock { started.compactMap { waits[$0] } } }
}
