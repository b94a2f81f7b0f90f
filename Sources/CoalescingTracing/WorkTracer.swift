#if Tracing
import CoalescingOperations
import Tracing

/// Which caller started a piece of work: compared by identity with each caller's own.
final class Starter: Sendable {}

/// One caller's span around its call to a traced coalescer, and the link it gets to the work's.
struct CallerSpan<Key: Sendable> {
    var name: String
    var key: Key
    var context: ServiceContext
    var tracer: any Tracer

    /// Runs `call` (the plain coalescer's call, handed the work this caller would start) in the
    /// caller's span, and links the span to the span of the work that served it. A prefetch is
    /// handed no value (nil): its span links to nothing.
    func traced<Value>(_ call: (WorkTracer) async throws -> Traced<Value>?) async throws -> Value? {
        let span = tracer.startSpan(name, context: context, ofKind: .internal)
        defer { span.end() }
        span.attributes["coalescing.key"] = "\(key)"
        let work = WorkTracer(name: "\(name) (work)", key: "\(key)", tracer: tracer, parent: span)
        do {
            let traced = try await call(work)
            if let traced {
                link(span, to: traced.workContext, started: traced.starter === work.starter)
            }
            return traced?.value
        } catch let failure as TracedFailure {
            link(span, to: failure.workContext, started: failure.starter === work.starter)
            span.recordError(failure.error)
            span.setStatus(SpanStatus(code: .error))
            throw failure.error
        } catch {
            // Its own timeout, or a cancellation: its task's, or the work's for everyone.
            let reason = error as? CoalescingError == .timedOut ? "timed_out" : "cancelled"
            span.addEvent(
                SpanEvent(
                    name: "coalescing.left",
                    attributes: ["coalescing.key": .string("\(key)"), "coalescing.reason": .string(reason)]))
            span.recordError(error)
            throw error
        }
    }

    /// Runs a call that is handed the work's value in the caller's span, as ``traced(_:)`` does.
    func wait<Value>(_ call: (WorkTracer) async throws -> Traced<Value>) async throws -> Value {
        try await traced { work -> Traced<Value>? in try await call(work) }!
    }

    private func link(_ span: any Span, to work: ServiceContext, started: Bool) {
        span.addLink(SpanLink(context: work, attributes: ["coalescing.role": started ? "started" : "joined"]))
        if !started {
            span.addEvent(SpanEvent(name: "coalescing.joined", attributes: ["coalescing.key": .string("\(key)")]))
        }
    }
}

/// Runs a piece of work in a span of its own, child of the span of the caller that started it:
/// that caller's context is handed over explicitly, since the work's task inherits no task-local
/// value. The work's span and the starting caller's carry the work's number (`coalescing.work`).
struct WorkTracer: Sendable {
    var name: String
    var key: String
    var tracer: any Tracer
    var parent: any Span
    let starter = Starter()

    func run<Value: Sendable>(
        _ operation: @Sendable (ServiceContext) async throws -> Value
    ) async throws -> Traced<Value> {
        let span = tracer.startSpan(name, context: parent.context, ofKind: .internal)
        defer { span.end() }
        span.attributes["coalescing.key"] = key
        if let work = ProgressReporter.current.work {
            span.attributes["coalescing.work"] = work
            parent.attributes["coalescing.work"] = work
        }
        let context = span.context
        do {
            let value = try await ServiceContext.$current.withValue(context) { try await operation(context) }
            return Traced(value: value, workContext: context, starter: starter)
        } catch let error as CancellationError {
            span.addEvent("coalescing.cancelled")
            throw error
        } catch {
            span.recordError(error)
            span.setStatus(SpanStatus(code: .error))
            throw TracedFailure(error: error, workContext: context, starter: starter)
        }
    }
}
#endif
