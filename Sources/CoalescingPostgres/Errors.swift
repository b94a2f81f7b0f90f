#if Postgres
import NIOCore
import PostgresNIO

/// Why a caller of a ``PostgresCoalescer`` heard no value, beyond what any coalescer throws
/// (the work's own error, `CancellationError`, `CoalescingError.timedOut`).
public enum CoalescingPostgresError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The database could not be reached (refused, restarting, shutting down, no answer within
    /// ``PostgresCoalescerConfiguration/connectTimeout``), with ``DatabaseUnavailablePolicy/fail``;
    /// the message says which.
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

    /// Sorts what the database stack threw into an outage or an error the callers should see.
    ///
    /// PostgresNIO's own description is redacted ("Generic description to prevent accidental
    /// leakage"), so the server's SQLSTATE and message are read from the error itself.
    init(_ error: any Error) {
        if let error = error as? CoalescingPostgresError {
            self = error
            return
        }
        guard let error = error as? PSQLError else {
            // Sockets, name resolution, the pool giving up: the database is out of reach.
            self = .databaseUnavailable(String(describing: error))
            return
        }
        switch error.code {
        case .server:
            let sqlState = error.serverInfo?[.sqlState] ?? ""
            let message = error.serverInfo?[.message] ?? ""
            // Class 08 is a connection exception; 57P01-57P03 a server shutting down, crashed or
            // starting; 53300 a server out of connection slots.
            if sqlState.hasPrefix("08") || ["57P01", "57P02", "57P03", "53300"].contains(sqlState) {
                self = .databaseUnavailable("SQLSTATE \(sqlState): \(message)")
            } else {
                self = .databaseError(sqlState: sqlState, message: message)
            }
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .poolClosed,
            .queryCancelled:
            let underlying = error.underlying.map { ": \(String(describing: $0))" } ?? ""
            self = .databaseUnavailable("\(error.code)\(underlying)")
        default:
            self = .databaseError(sqlState: "", message: "\(error.code)")
        }
    }

    /// Whether the database was out of reach, the one case ``DatabaseUnavailablePolicy`` decides.
    var isUnavailable: Bool {
        if case .databaseUnavailable = self { return true }
        return false
    }
}
#endif
