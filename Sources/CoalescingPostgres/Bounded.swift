#if Postgres
import Foundation

/// A deadline for a database statement that must not hold a caller: the statement runs in a task
/// of its own, and the caller goes on when it ends or when the deadline passes, whichever is first.
/// A task group would wait for a statement that never ends; this does not.
enum Bounded {
    static func run(within limit: Duration, _ body: @escaping @Sendable () async throws -> Void) async throws {
        let once = ResumeOnce()
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            once.set(continuation)
            Task {
                do {
                    try await body()
                    once.resume(.success(()))
                } catch {
                    once.resume(.failure(error))
                }
            }
            Task {
                try? await Task.sleep(for: limit)
                once.resume(.failure(CoalescingPostgresError.databaseUnavailable("no answer within \(limit)")))
            }
        }
    }
}

/// Resumes a continuation once, whoever comes first. `@unchecked Sendable`: `lock` guards
/// `continuation`.
private final class ResumeOnce: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Void, any Error>?

    func set(_ continuation: CheckedContinuation<Void, any Error>) {
        lock.withLock { self.continuation = continuation }
    }

    func resume(_ result: Result<Void, any Error>) {
        lock.withLock {
            defer { continuation = nil }
            return continuation
        }?.resume(with: result)
    }
}
#endif
