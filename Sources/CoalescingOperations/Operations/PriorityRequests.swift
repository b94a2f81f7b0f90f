/// Raised priorities waiting to be written to Foundation's properties.
///
/// Foundation's `queuePriority` setter is not safe to call from two threads at once, and may post
/// KVO, so it is called with no lock held by one thread at a time: whichever holds `isApplying`.
struct PriorityRequests {
    var requested: OperationPriority
    var applied: OperationPriority
    var isApplying: Bool

    init(current: OperationPriority, isApplying: Bool) {
        requested = current
        applied = current
        self.isApplying = isApplying
    }
}
