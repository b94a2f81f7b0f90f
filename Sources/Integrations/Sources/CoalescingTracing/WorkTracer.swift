import Tracing

/// Which caller started a piece of work: compared by identity with each caller's own.
final class Starter: Sendable {}

/// The work's value with the context of the work's span and the caller that started it, so that
/// every caller can link its span to the work's.
struct SharedValue<Value: Sendable>: Sendable {
    var value: Value
    var work: ServiceContext
    var starter: Starter
}

/// The work's error, carried like ``SharedValue``. Cancellation is never wrapped, so that the
/// coalescer still counts cancelled work as cancelled.
struct SharedFailure: Error {
    var error: any Error
    var work: ServiceContext
    var starter: Starter
}

/// Runs a piece of work in a span of its own, child of the context of the caller that started it:
/// that context is handed over explicitly, since the work's task inherits no task-local value.
struct WorkTracer: Sendable {
    var name: String
    var key: String
    var tracer: any Tracer
    var parent: ServiceContext
    var starter: Starter

    func run<Value: Sendable>(
        _ operation: @Sendable (ServiceContext) async throws -> Value
    ) async throws -> SharedValue<Value> {
        let span = tracer.startSpan(name, context: parent, ofKind: .internal)
        defer { span.end() }
        span.attributes["coalescing.key"] = key
        let context = span.context
        do {
            let value = try await ServiceContext.$current.withValue(context) { try await operation(context) }
            return SharedValue(value: value, work: context, starter: starter)
        } catch let error as CancellationError {
            span.addEvent("coalescing.cancelled")
            throw error
        } catch {
            span.recordError(error)
            span.setStatus(SpanStatus(code: .error))
            throw SharedFailure(error: error, work: context, starter: starter)
        }
    }
}
