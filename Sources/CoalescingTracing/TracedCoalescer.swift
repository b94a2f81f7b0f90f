#if Tracing
import CoalescingOperations
import Tracing

/// An ``InFlightTaskCoalescer`` whose work runs in a span. Every control of the plain coalescer
/// (`forget(key:)`, `cancel(key:)`, `cancelAll()`, `statistics`, and the `observer:` and
/// `stallThreshold:` of its initialiser) is its own, since it is the plain coalescer, its values
/// wrapped in ``Traced``; call it through the `value(key:span:…)` that this module adds, which
/// takes every argument of the plain `value(key:…)`.
///
/// ```swift
/// import CoalescingOperations
/// import CoalescingTracing
///
/// let profiles = TracedCoalescer<String, String>(stallThreshold: .seconds(10))
///
/// func profile(id: String) async throws -> String {
///     try await profiles.value(key: id, span: "load profile", timeout: .seconds(2)) { workContext in
///         "profile \(id)"  // runs with `workContext` as `ServiceContext.current`
///     }
/// }
///
/// func saved(id: String) {
///     profiles.forget(key: id)
/// }
/// ```
public typealias TracedCoalescer<Key: Hashable & Sendable, Value: Sendable> = InFlightTaskCoalescer<
    Key, Traced<Value>
>

/// A ``PrefetchableTaskCoalescer`` whose work runs in a span, as ``TracedCoalescer`` is for
/// ``InFlightTaskCoalescer``: every control is the plain coalescer's.
public typealias TracedPrefetchableCoalescer<Key: Hashable & Sendable, Value: Sendable> = PrefetchableTaskCoalescer<
    Key, Traced<Value>
>

/// The value of traced work, as a traced coalescer holds it: the value, with the context of the
/// span the work ran in, so that every caller's span can link to it.
public struct Traced<Value: Sendable>: Sendable {
    /// The work's value, the same for every caller.
    public var value: Value
    /// The context of the work's span.
    public var workContext: ServiceContext
    let starter: Starter
}

/// The error of traced work, as the callers of a traced coalescer share it; each caller then
/// throws ``error`` itself. It is what the coalescer's observer sees as a failed work's error, and
/// it prints as that error.
public struct TracedFailure: Error, CustomStringConvertible {
    /// The error the work threw.
    public var error: any Error
    /// The context of the work's span.
    public var workContext: ServiceContext
    let starter: Starter

    /// The work's error, as it prints.
    public var description: String { "\(error)" }
}

/// What a traced coalescer needs of the coalescer it is: the plain `value(key:…)`, which both
/// task coalescers have.
public protocol TaskCoalescer<Key, Value>: Sendable {
    /// What tells work apart.
    associatedtype Key: Hashable & Sendable
    /// What the work returns.
    associatedtype Value: Sendable

    /// The plain call: ``InFlightTaskCoalescer``'s or ``PrefetchableTaskCoalescer``'s `value(key:…)`.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work.
    ///   - priority: The priority of the work's task, if this call starts it.
    ///   - name: The name of the work's task, if this call starts it.
    ///   - timeout: How long this caller waits at most.
    ///   - whenAbandoned: What happens to the work if every caller withdraws, when this call starts it.
    ///   - progress: Receives the work's progress.
    ///   - operation: The work.
    /// - Returns: The work's value.
    /// - Throws: As the coalescer's own `value(key:…)`.
    func value(
        key: Key, priority: TaskPriority?, name: String?, timeout: Duration?, whenAbandoned: AbandonedWorkPolicy,
        progress: (@Sendable (WorkProgress) -> Void)?, operation: @escaping @Sendable () async throws -> Value
    ) async throws -> Value
}

extension InFlightTaskCoalescer: TaskCoalescer {}
extension PrefetchableTaskCoalescer: TaskCoalescer {}

extension TaskCoalescer {
    /// Returns the result of the work in flight for `key` (or, from a ``PrefetchableTaskCoalescer``,
    /// the prefetched result), starting `operation` if there is none, in a span of this caller's
    /// own; the work runs in a span of its own, child of the span of the caller that started it. A
    /// result taken from a prefetch links to the prefetch's work span.
    ///
    /// The work runs in a task that inherits no caller's task-local values (Guarantee 20), so the
    /// context of the caller that starts it is captured here and handed to the work explicitly.
    /// Every caller's span gets a link to the work's span, with the attribute `coalescing.role`
    /// (`started` or `joined`). The work's span and the span of the caller that started it carry
    /// `coalescing.key` and `coalescing.work`, the number the coalescer's events give the work. A
    /// caller that joined gets the event `coalescing.joined`; one that leaves before the work ends
    /// (its timeout, its task cancelled, the work cancelled) the event `coalescing.left`.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work.
    ///   - span: The operation name of the callers' spans; the work's span is named `<span> (work)`.
    ///   - context: The caller's context, parent of its span; the task's current one by default.
    ///   - tracer: The tracer that starts the spans; the one bootstrapped in `InstrumentationSystem`
    ///     by default.
    ///   - priority: The priority of the work's task, if this call starts it, as in the plain call.
    ///   - name: The name of the work's task, if this call starts it, as in the plain call.
    ///   - timeout: How long this caller waits at most, as in the plain call.
    ///   - whenAbandoned: What happens to the work if every caller withdraws, when this call starts it.
    ///   - progress: Receives the work's progress, as in the plain call.
    ///   - operation: The work, handed its span's context, which is also its `ServiceContext.current`
    ///     (so that an HTTP client it calls propagates the work's trace).
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: What the plain `value(key:…)` throws: the work's error as it threw it,
    ///   `CancellationError` if this caller's task was cancelled, `CoalescingError.cancelled` if
    ///   the work was cancelled for everyone, or `CoalescingError.timedOut`.
    public func value<Wrapped: Sendable>(
        key: Key,
        span: String,
        context: @autoclosure () -> ServiceContext = .current ?? .topLevel,
        tracer: any Tracer = InstrumentationSystem.tracer,
        priority: TaskPriority? = nil,
        name: String? = nil,
        timeout: Duration? = nil,
        whenAbandoned: AbandonedWorkPolicy = .cancel,
        progress: (@Sendable (WorkProgress) -> Void)? = nil,
        operation: @escaping @Sendable (ServiceContext) async throws -> Wrapped
    ) async throws -> Wrapped where Value == Traced<Wrapped> {
        try await CallerSpan(name: span, key: key, context: context(), tracer: tracer).wait { work in
            try await value(
                key: key, priority: priority, name: name, timeout: timeout, whenAbandoned: whenAbandoned,
                progress: progress
            ) { try await work.run(operation) }
        }
    }
}

extension PrefetchableTaskCoalescer {
    /// Prefetches the result for `key` as the plain `prefetch(key:…)` does, in a span of this
    /// caller's own, parent of the work's span if this call starts the work.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work.
    ///   - span: The operation name of the caller's span; the work's span is named `<span> (work)`.
    ///   - context: The caller's context, parent of its span; the task's current one by default.
    ///   - tracer: The tracer that starts the spans; the bootstrapped one by default.
    ///   - priority: The work's task priority if this call starts it.
    ///   - name: The work's task name if this call starts it.
    ///   - timeout: How long this caller waits at most.
    ///   - whenAbandoned: What happens to the work if every caller withdraws, when this call starts it.
    ///   - operation: The work, handed its span's context.
    /// - Throws: What the plain `prefetch(key:…)` throws.
    public func prefetch<Wrapped: Sendable>(
        key: Key,
        span: String,
        context: @autoclosure () -> ServiceContext = .current ?? .topLevel,
        tracer: any Tracer = InstrumentationSystem.tracer,
        priority: TaskPriority? = nil,
        name: String? = nil,
        timeout: Duration? = nil,
        whenAbandoned: AbandonedWorkPolicy = .cancel,
        operation: @escaping @Sendable (ServiceContext) async throws -> Wrapped
    ) async throws where Value == Traced<Wrapped> {
        _ = try await CallerSpan(name: span, key: key, context: context(), tracer: tracer).traced {
            work -> Traced<Wrapped>? in
            try await prefetch(
                key: key, priority: priority, name: name, timeout: timeout, whenAbandoned: whenAbandoned
            ) { try await work.run(operation) }
            return nil
        }
    }
}
#endif
