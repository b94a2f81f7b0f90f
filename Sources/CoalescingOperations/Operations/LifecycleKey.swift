/// The KVO keys through which `OperationQueue` watches an operation's lifecycle.
///
/// On Linux, Foundation reacts to `didChangeValue(forKey:)` for exactly these names (and their
/// short forms); any other key, such as a custom `state`, goes unseen and jams the queue.
enum LifecycleKey {
    static let isExecuting = "isExecuting"
    static let isFinished = "isFinished"

    /// The keys an operation leaving `.executing` changes.
    static let executingAndFinished = [isExecuting, isFinished]
    /// The key an operation that never executed changes when it finishes.
    static let finishedOnly = [isFinished]
}
