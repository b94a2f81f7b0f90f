import Foundation

/// A value guarded by an `NSCondition`, so that threads can both mutate it and wait for it to change.
///
/// This is the only `@unchecked Sendable` type in the module: `condition` guards `state`, which is read and written
/// exclusively between `condition.lock()` and `condition.unlock()`.
final class ConditionLock<State: Sendable>: @unchecked Sendable {
    private let condition = NSCondition()
    private var state: State

    init(_ state: State) {
        self.state = state
    }

    /// Runs `body` with exclusive access to the state, then wakes every waiter so it can re-check its predicate.
    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        condition.lock()
        defer {
            condition.broadcast()
            condition.unlock()
        }
        return try body(&state)
    }

    /// Blocks until `predicate` holds or `deadline` passes; returns whether the predicate held.
    func wait(until deadline: Date, for predicate: (State) -> Bool) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while !predicate(state) {
            // `wait(until:)` can wake spuriously, so only its timeout result ends the loop.
            if !condition.wait(until: deadline) {
                return predicate(state)
            }
        }
        return true
    }
}
