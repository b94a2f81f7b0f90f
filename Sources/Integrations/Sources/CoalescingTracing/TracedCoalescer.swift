import CoalescingOperations
import Tracing

/// An ``InFlightTaskCoalescer`` that traces: a span per caller, a span per piece of work, and a
/// link from every caller's span to the span of the work that served it.
///
/// The work runs in a task of its own that inherits no caller's task-local values (Guarantee 20),
/// so its span cannot find a parent in `ServiceContext.current`. Instead, each caller's context is
/// captured before the call and handed to the work explicitly: the work that runs is the one its
/// first caller started, so its span is a child of that caller's span, in that caller's trace.
/// Every caller's span then gets a link to the work's span, with the attribute `coalescing.role`
/// saying whether it `started` the work or `joined` it, and a caller that joined also gets the event
/// `coalescing.joined`. A caller that leaves before the work ends (its timeout, its task
/// cancelled) gets the event `coalescing.left`, naming the work by its key.
///
/// ```swift
/// import CoalescingTracing
///
/// let profiles = TracedCoalescer<String, String>(name: "load profile")
///
/// func profile(id: String) async throws -> String {
///     try await profiles.value(key: id, timeout: .seconds(2)) { workContext in
///         "profile \(id)"  // runs with `workContext` as `ServiceContext.current`
///     }
/// }
/// ```
public final class TracedCoalescer<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private let coalescer: InFlightTaskCoalescer<Key, SharedValue<Value>>
    private let name: String
    private let tracer: any Tracer

    /// Creates a traced coalescer with nothing in flight.
    ///
    /// - Parameters:
    ///   - name: The operation name of the callers' spans; the work's span is named `<name> (work)`.
    ///   - tracer: The tracer that starts the spans; the one bootstrapped in `InstrumentationSystem`
    ///     by default.
    ///   - observer: Receives the coalescer's events, as given to `InFlightTaskCoalescer`.
    public init(
        name: String, tracer: any Tracer = InstrumentationSystem.tracer,
        observer: (@Sendable (CoalescingEvent<Key>) -> Void)? = nil
    ) {
        self.name = name
        self.tracer = tracer
        coalescer = InFlightTaskCoalescer(observer: observer)
    }

    /// What the coalescer has done since it was created, as `InFlightTaskCoalescer.statistics`.
    public var statistics: CoalescingStatistics {
        coalescer.statistics
    }

    /// Returns the result of the work in flight for `key`, starting `operation` if there is none,
    /// in a span of this caller's own.
    ///
    /// - Parameters:
    ///   - key: Equal for calls that do the same work.
    ///   - context: The caller's context, parent of its span; the task's current one by default.
    ///   - timeout: How long this caller waits at most, as in `InFlightTaskCoalescer`.
    ///   - whenAbandoned: What happens to the work if every caller withdraws, when this call starts it.
    ///   - operation: The work, handed its span's context, which is also its `ServiceContext.current`
    ///     (so that an HTTP client it calls propagates the work's trace).
    /// - Returns: The work's value, the same for every caller.
    /// - Throws: What `InFlightTaskCoalescer.value` throws: the work's error as it threw it,
    ///   `CancellationError` if this caller's task was cancelled, `CoalescingError.cancelled` if
    ///   the work was cancelled for everyone, or `CoalescingError.timedOut`.
    public func value(
        key: Key,
        context: @autoclosure () -> ServiceContext = .current ?? .topLevel,
        timeout: Duration? = nil,
        whenAbandoned: AbandonedWorkPolicy = .cancel,
        operation: @escaping @Sendable (ServiceContext) async throws -> Value
    ) async throws -> Value {
        let callerSpan = tracer.startSpan(name, context: context(), ofKind: .internal)
        defer { callerSpan.end() }
        let keyName = "\(key)"
        callerSpan.attributes["coalescing.key"] = keyName
        let work = WorkTracer(
            name: "\(name) (work)", key: keyName, tracer: tracer, parent: callerSpan.context, starter: Starter())
        do {
            let shared = try await coalescer.value(key: key, timeout: timeout, whenAbandoned: whenAbandoned) {
                try await work.run(operation)
            }
            link(callerSpan, key: keyName, to: shared.work, started: shared.starter === work.starter)
            return shared.value
        } catch let failure as SharedFailure {
            link(callerSpan, key: keyName, to: failure.work, started: failure.starter === work.starter)
            callerSpan.recordError(failure.error)
            callerSpan.setStatus(SpanStatus(code: .error))
            throw failure.error
        } catch {
            // Its own timeout, or a cancellation: its task's, or the work's for everyone.
            let reason = error as? CoalescingError == .timedOut ? "timed_out" : "cancelled"
            callerSpan.addEvent(
                SpanEvent(
                    name: "coalescing.left",
                    attributes: ["coalescing.key": .string(keyName), "coalescing.reason": .string(reason)]))
            callerSpan.recordError(error)
            throw error
        }
    }

    private func link(_ callerSpan: any Span, key: String, to work: ServiceContext, started: Bool) {
        callerSpan.addLink(SpanLink(context: work, attributes: ["coalescing.role": started ? "started" : "joined"]))
        if !started {
            callerSpan.addEvent(SpanEvent(name: "coalescing.joined", attributes: ["coalescing.key": .string(key)]))
        }
    }
}
