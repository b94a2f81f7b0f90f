/// Test equipment: runs `callers` concurrent calls of one key through `call`, the first starting
/// work that waits at a release gate and every other joining it, and returns once all have arrived.
///
/// - Parameters:
///   - callers: How many concurrent calls.
///   - arrivals: Advanced by the coalescer's observer once per caller that started or joined work.
///   - call: One caller's call, given its index and the work to hand to the coalescer.
/// - Returns: The tasks of the calls, and the gate the work waits at: the test advances it (or
///   cancels tasks) to go on.
/// - Throws: `CancellationError` if the test is cancelled while callers arrive.
public func burst<Value: Sendable>(
    of callers: Int,
    arrivals: Threshold,
    call: @escaping @Sendable (_ index: Int, _ work: @escaping @Sendable () async throws -> Void) async throws -> Value
) async throws -> (tasks: [Task<Value, any Error>], release: Threshold) {
    let release = Threshold()
    var tasks: [Task<Value, any Error>] = []
    for index in 0..<callers {
        tasks.append(Task { try await call(index) { try await release.wait() } })
        // The first caller's work must be in flight before the others arrive, so that they join it.
        try await arrivals.wait(until: index + 1)
    }
    return (tasks, release)
}
