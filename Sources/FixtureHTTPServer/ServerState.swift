/// Everything about a running server that more than one thread reads or writes; always accessed through
/// ``ServerCore/state``'s lock.
struct ServerState: Sendable {
    /// Responses by path (query excluded).
    var routes: [String: FixtureResponse]
    /// Every parsed request, in arrival order.
    var requests: [FixtureRequest] = []
    /// Requests whose client hung up before the response was written.
    var abandonedRequestCount = 0
    /// Whether requests arriving now must wait for the next release.
    var isHeld = false
    /// Bumped by every release; a held request waits until this exceeds the value it saw on arrival.
    var releaseGeneration = 0
    /// Set once by `stop()`; threads that see it finish without answering.
    var isStopped = false
    /// The pipes of every thread currently blocked in `poll()`, so state changes can wake them.
    var wakePipes: [Int: WakePipe] = [:]
    /// The key for the next entry in `wakePipes`.
    var nextWakePipeID = 0

    /// Wakes every polling thread so it re-reads the state; the caller holds the lock.
    func wakeAll() {
        for pipe in wakePipes.values {
            pipe.signal()
        }
    }
}
