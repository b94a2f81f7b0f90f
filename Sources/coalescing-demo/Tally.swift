import Foundation

/// What the demo saw: each caller's outcome, the requests it sent, and how long requests took.
final class Tally: @unchecked Sendable {
    // @unchecked: every property is guarded by `lock`.
    private let lock = NSLock()
    private var outcomes: [(caller: String, request: String, outcome: CallerOutcome)] = []
    private var requests: [String] = []
    private var started: Set<String> = []
    private var waits: [String: Duration] = [:]

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

    /// A caller that started work rather than joining it.
    func startedWork(_ caller: String) {
        lock.withLock { _ = started.insert(caller) }
    }

    func requestSent(_ description: String) {
        lock.withLock { requests.append(description) }
    }

    var callerOutcomes: [(caller: String, request: String, outcome: CallerOutcome)] { lock.withLock { outcomes } }
    var requestsSent: [String] { lock.withLock { requests } }
    /// How long each answered request took: the waits of the callers that started work.
    var responseDurations: [Duration] { lock.withLock { started.compactMap { waits[$0] } } }
}
