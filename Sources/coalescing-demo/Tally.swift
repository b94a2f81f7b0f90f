import Foundation

/// Counts callers served and requests sent.
final class Tally: @unchecked Sendable {
    // @unchecked: both counters are guarded by `lock`.
    private let lock = NSLock()
    private var served = 0
    private var requests: [String] = []

    func callerServed() {
        lock.withLock { served += 1 }
    }

    func requestSent(_ description: String) {
        lock.withLock { requests.append(description) }
    }

    var callersServed: Int { lock.withLock { served } }
    var requestsSent: [String] { lock.withLock { requests } }
}
