/// One piece of in-flight async work and the tasks waiting for its result.
///
/// Waiters suspend on continuations rather than on the work's `Task`, so that a waiter whose own
/// task is cancelled can leave at once while the others keep waiting. Each waiter first reserves
/// a slot (on its coalescer's actor, atomically with finding the call), then parks its
/// continuation there; every state a slot can meet in between is handled, so no interleaving of
/// completion, cancellation and leaving resumes a continuation twice or never.
final class InFlightCall<Value: Sendable>: Sendable {
    // Unsafe rather than checked: `State` resumes each parked continuation exactly once (the
    // tests drive every interleaving), and the checked kind costs an allocation per waiter.
    typealias Waiter = UnsafeContinuation<Value, Error>

    private let state: LockedState<State>

    /// Creates a running call with slot 0 reserved for its first caller.
    ///
    /// - Parameter priority: The priority the work starts with, to know when a waiter raises it.
    private init(priority: TaskPriority) {
        state = LockedState(State(slots: [.reserved], waiting: 1, priority: priority))
    }

    /// Starts `operation` in a task of its own and returns the call its callers wait on, with a
    /// slot reserved for the first caller (before the work starts, so that it cannot miss it).
    ///
    /// - Parameters:
    ///   - priority: The priority of the task running `operation`; nil inherits the caller's.
    ///   - name: The name of that task.
    ///   - operation: The work.
    ///   - onEnd: Called when the work has ended and its waiters were resumed, so that the owner
    ///     can forget the call.
    /// - Returns: The call, and the slot reserved in it for the first caller.
    static func start(
        priority: TaskPriority?,
        name: String?,
        operation: @escaping @Sendable () async throws -> Value,
        onEnd: @escaping @Sendable (InFlightCall<Value>) async -> Void
    ) -> (call: InFlightCall<Value>, slot: Int) {
        let call = InFlightCall(priority: priority ?? Task.currentPriority)
        let task = Task.named(name, priority: priority) {
            let result: Result<Value, Error>
            do {
                result = .success(try await operation())
            } catch {
                result = .failure(error)
            }
            call.complete(with: result)
            await onEnd(call)
        }
        if call.state.withLock({ $0.attach(task) }) {
            task.cancel()
        }
        return (call, 0)
    }

    /// Reserves a place for one more waiter, unless the work already ended or was abandoned, and
    /// raises the work's priority to the waiter's if it is more urgent.
    func reserve(escalatingTo priority: TaskPriority) -> Int? {
        let (slot, task) = state.withLock { state -> (Int?, Task<Void, Never>?) in
            guard let slot = state.reserve() else { return (nil, nil) }
            return (slot, state.escalate(to: priority))
        }
        if let task {
            Self.escalate(task, to: priority)
        }
        return slot
    }

    /// Waits in `slot` for the result. Throws `CancellationError` as soon as the waiting task is
    /// cancelled, leaving the work to the other waiters; the last one to leave cancels the work.
    ///
    /// Runs on the caller's actor (the coalescer's), so that parking costs no hop off it.
    func wait(in slot: Int, isolation: isolated (any Actor)? = #isolation) async throws -> Value {
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (waiter: Waiter) in
                if let outcome = state.withLock({ $0.park(waiter, in: slot) }) {
                    waiter.resume(with: outcome)
                }
            }
        } onCancel: {
            let (waiter, abandonedTask) = state.withLock { $0.leave(slot) }
            abandonedTask?.cancel()
            waiter?.resume(throwing: CancellationError())
        }
    }

    /// How the call ended, for an owner that acts on its result after the waiters were resumed:
    /// nil while the work runs; `CancellationError` if it was cancelled or abandoned.
    var ending: Result<Value, Error>? {
        state.withLock { state in
            switch state.outcome {
            case .running: nil
            case .abandoned: .failure(CancellationError())
            case .finished(let result): result
            }
        }
    }

    /// How many callers wait for the work while it runs; for tests.
    var waitingCount: Int {
        state.withLock { $0.isRunning ? $0.waiting : 0 }
    }

    /// Hands `result` to every waiter. Does nothing if the work was cancelled or abandoned first.
    func complete(with result: Result<Value, Error>) {
        let (waiters, _) = state.withLock { $0.finish(with: result) }
        for waiter in waiters {
            waiter.resume(with: result)
        }
    }

    /// Cancels the work for every waiter: each throws `CancellationError` at once.
    func cancel() {
        let (waiters, task) = state.withLock { $0.finish(with: .failure(CancellationError())) }
        task?.cancel()
        for waiter in waiters {
            waiter.resume(throwing: CancellationError())
        }
    }

    /// Raises `task`'s priority, on runtimes that can (Swift 6.2 and later).
    private static func escalate(_ task: Task<Void, Never>, to priority: TaskPriority) {
        #if compiler(>=6.2)
        if #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) {
            task.escalatePriority(to: priority)
        }
        #endif
    }

    private struct State {
        enum Slot {
            /// Reserved by a waiter that has not parked its continuation yet.
            case reserved
            /// Left before parking: the continuation is resumed with `CancellationError` when parked.
            case leftEarly
            case waiting(Waiter)
            case done
        }

        enum Outcome {
            case running
            /// Every waiter left; the work was cancelled and its result will be dropped.
            case abandoned
            case finished(Result<Value, Error>)
        }

        var slots: ContiguousArray<Slot> = []
        /// Slots reserved or waiting while the work runs.
        var waiting = 0
        var outcome = Outcome.running
        var task: Task<Void, Never>?
        var priority: TaskPriority?

        var isRunning: Bool {
            if case .running = outcome { true } else { false }
        }

        /// Stores the task; returns true if it must be cancelled because the call already ended.
        mutating func attach(_ task: Task<Void, Never>) -> Bool {
            guard isRunning else { return true }
            self.task = task
            return false
        }

        mutating func reserve() -> Int? {
            guard isRunning else { return nil }
            slots.append(.reserved)
            waiting += 1
            return slots.count - 1
        }

        /// Parks `waiter`; returns the outcome to resume it with at once, if there already is one.
        mutating func park(_ waiter: Waiter, in slot: Int) -> Result<Value, Error>? {
            switch (slots[slot], outcome) {
            case (.reserved, .running):
                slots[slot] = .waiting(waiter)
                return nil
            case (.reserved, .finished(let result)):
                slots[slot] = .done
                return result
            case (.leftEarly, _):
                slots[slot] = .done
                return .failure(CancellationError())
            case (.reserved, .abandoned), (.waiting, _), (.done, _):
                // A reserved slot keeps the call from being abandoned, and each slot parks once.
                preconditionFailure("InFlightCall: slot \(slot) parked twice or after it was abandoned")
            }
        }

        /// Removes the waiter in `slot`; returns it (to resume with `CancellationError`) and the
        /// task to cancel if it was the last one waiting.
        mutating func leave(_ slot: Int) -> (Waiter?, Task<Void, Never>?) {
            var waiter: Waiter?
            switch slots[slot] {
            case .waiting(let parked):
                waiter = parked
                slots[slot] = .done
            case .reserved:
                slots[slot] = .leftEarly
            case .leftEarly, .done:
                return (nil, nil)
            }
            guard isRunning else { return (waiter, nil) }
            waiting -= 1
            guard waiting == 0 else { return (waiter, nil) }
            outcome = .abandoned
            defer { task = nil }
            return (waiter, task)
        }

        /// Returns the task to escalate, if `priority` is more urgent than the work's.
        mutating func escalate(to priority: TaskPriority) -> Task<Void, Never>? {
            guard isRunning, let current = self.priority, priority > current else { return nil }
            self.priority = priority
            return task
        }

        /// Ends the call with `result`: returns the parked waiters and the task, or nothing if the
        /// call had already ended. Reserved slots find the outcome when they park.
        mutating func finish(with result: Result<Value, Error>) -> (ContiguousArray<Waiter>, Task<Void, Never>?) {
            guard isRunning else { return ([], nil) }
            outcome = .finished(result)
            var waiters: ContiguousArray<Waiter> = []
            waiters.reserveCapacity(waiting)
            for index in slots.indices {
                if case .waiting(let waiter) = slots[index] {
                    waiters.append(waiter)
                    slots[index] = .done
                }
            }
            defer { task = nil }
            return (waiters, task)
        }
    }
}
