/// Passes a task's cancellation to the caller it enqueued, whichever of the two happens first.
///
/// `withTaskCancellationHandler` may run its handler before, during or after the body registers
/// the caller; the relay remembers an early cancellation and applies it on registration.
final class WithdrawalRelay<Value>: Sendable {
    private enum State {
        case waiting
        case registered(CoalescingHandle<Value>)
        case cancelled
    }

    private let state = LockedState(State.waiting)

    /// Records the caller's handle; withdraws it at once if the task was already cancelled.
    func register(_ handle: CoalescingHandle<Value>) {
        let cancelled = state.withLock { state in
            if case .cancelled = state { return true }
            state = .registered(handle)
            return false
        }
        if cancelled {
            handle.cancel()
        }
    }

    /// Withdraws the registered caller, or the one registered later.
    func cancel() {
        let handle: CoalescingHandle<Value>? = state.withLock { state in
            defer { state = .cancelled }
            if case .registered(let handle) = state { return handle }
            return nil
        }
        handle?.cancel()
    }
}
