import Synchronization

/// A one-shot gate for tasks: ``wait()`` suspends until ``open()`` has been called.
///
/// The task benchmarks hold work in flight on one, and wait on one instead of sleeping.
public final class AsyncGate: Sendable {
    private struct State {
        var isOpen = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    /// Creates a closed gate.
    public init() {}

    /// Opens the gate: resumes every waiting task, and lets later ones through at once.
    public func open() {
        let waiters = state.withLock { state in
            state.isOpen = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters {
            waiter.resume()
        }
    }

    /// Suspends until the gate is open.
    public func wait() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let isOpen = state.withLock { state in
                if !state.isOpen {
                    state.waiters.append(waiter)
                }
                return state.isOpen
            }
            if isOpen {
                waiter.resume()
            }
        }
    }
}
