#if Postgres
import NIOConcurrencyHelpers

/// A deadline for a database call that must not hold a caller: the call runs in a task of its own,
/// and the caller goes on when it ends or when the deadline passes, whichever is first; the other
/// one is cancelled. A task group would wait for a statement that never ends (a backend whose
/// network went silent does not notice a cancelled task); this does not.
enum Bounded {
    static func run<Result: Sendable>(
        within limit: Duration, _ body: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        let race = Race<Result>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                race.start(
                    continuation,
                    work: Task { race.finish(await Swift.Result { try await body() }) },
                    timer: Task {
                        try await Task.sleep(for: limit)
                        race.finish(.failure(CoalescingPostgresError.databaseUnavailable("no answer within \(limit)")))
                    })
            }
        } onCancel: {
            race.finish(.failure(CancellationError()))
        }
    }
}

/// The two tasks of a ``Bounded`` call and the caller's continuation, resumed once.
private final class Race<Value: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Value, any Error>?
        var tasks: [Task<Void, Never>] = []
        var timer: Task<Void, any Error>?
        /// An end that came before `start`: a cancellation of the caller's own task.
        var early: Result<Value, any Error>?
    }
    private let state = NIOLockedValueBox(State())

    func start(
        _ continuation: CheckedContinuation<Value, any Error>, work: Task<Void, Never>, timer: Task<Void, any Error>
    ) {
        let early = state.withLockedValue { state in
            if state.early == nil {
                state.continuation = continuation
                state.tasks = [work]
                state.timer = timer
            }
            return state.early
        }
        if let early {
            work.cancel()
            timer.cancel()
            continuation.resume(with: early)
        }
    }

    func finish(_ result: Result<Value, any Error>) {
        let (continuation, tasks, timer) = state.withLockedValue { state in
            if state.continuation == nil, state.tasks.isEmpty, state.early == nil { state.early = result }
            defer {
                state.continuation = nil
                state.tasks = []
                state.timer = nil
            }
            return (state.continuation, state.tasks, state.timer)
        }
        guard let continuation else { return }
        for task in tasks { task.cancel() }
        timer?.cancel()
        continuation.resume(with: result)
    }
}

extension Result where Failure == any Error {
    /// The result of an async throwing body.
    init(_ body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
#endif
