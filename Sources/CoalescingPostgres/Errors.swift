#if Postgres
// The error alone, with no import: the state machines carry it, and .ci/session-explorer-catches
// compiles them without the database packages. Causes.swift sorts what the database stack threw.

/// Why a caller of a ``PostgresCoalescer`` heard no value, beyond what any coalescer throws
/// (the work's own error, `CancellationError`, `CoalescingError.timedOut`).
public enum CoalescingPostgresError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The database could not be had, with ``DatabaseUnavailablePolicy/fail``: the message says
    /// why, in words: the connection refused, no answer within
    /// ``PostgresCoalescerConfiguration/connectTimeout``, authentication refused (with the server's
    /// SQLSTATE and message), TLS failed, the server restarting or shutting down. The causes of
    /// failed connection attempts come from the client's pool, which tells them to its log only:
    /// they are named for a client the coalescer made from a URL; on the app's own client, the
    /// client's log says why, at info level ("Connection creation failed").
    case databaseUnavailable(String)
    /// The database answered with an error that is not an outage: a missing table, a missing
    /// privilege, a failed statement. `sqlState` is PostgreSQL's five-character code (`42P01`,
    /// `42501`…), or empty for an error of the client itself; `message` is the server's own text.
    case databaseError(sqlState: String, message: String)
    /// The work threw in the process that ran it, and this caller waited for it from another
    /// process; the message describes the error there (errors do not cross processes).
    case failedInAnotherProcess(String)
    /// The value produced in another process encoded to more than
    /// ``PostgresCoalescerConfiguration/maximumValueBytes`` and was not published.
    case valueTooLarge(bytes: Int, limit: Int)
    /// The value published by another process did not decode as this process's `Value`: the fleet
    /// runs two versions of the type under one table.
    case undecodableValue(String)
    /// The configuration cannot be used; the message says why.
    case invalidConfiguration(String)
    /// ``PostgresCoalescer/checkSchema()`` found the schema not ready: each string names what is
    /// missing (the table, the sequence, a column, a privilege).
    case schemaNotReady([String])

    /// The error on one line, for logs.
    public var description: String {
        switch self {
        case .databaseUnavailable(let message): "the database is unavailable: \(message)"
        case .databaseError(let sqlState, let message): "the database answered SQLSTATE \(sqlState): \(message)"
        case .failedInAnotherProcess(let message): "the work failed in the process that ran it: \(message)"
        case .valueTooLarge(let bytes, let limit):
            "the value took \(bytes) bytes, more than the \(limit) bytes published across processes"
        case .undecodableValue(let message): "the value published by another process did not decode: \(message)"
        case .invalidConfiguration(let message): "invalid configuration: \(message)"
        case .schemaNotReady(let missing): "the schema is not ready: \(missing.joined(separator: "; "))"
        }
    }

    /// Whether the database was out of reach, the one case ``DatabaseUnavailablePolicy`` decides.
    var isUnavailable: Bool {
        if case .databaseUnavailable = self { return true }
        return false
    }
}
#endif
