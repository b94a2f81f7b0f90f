#if Postgres
import Foundation
import NIOCore
import PostgresNIO

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

    /// Sorts what the database stack threw into an outage or an error the callers should see, and
    /// says which outage: refused, no answer in time, authentication, TLS, a server going away.
    ///
    /// PostgresNIO's own description is redacted ("Generic description to prevent accidental
    /// leakage"), so the server's SQLSTATE and message, and the socket's error, are read from the
    /// error's fields.
    init(_ error: any Error) {
        if let error = error as? CoalescingPostgresError {
            self = error
            return
        }
        guard let error = error as? PSQLError else {
            // Sockets, name resolution, the pool giving up: the database is out of reach.
            self = .databaseUnavailable(Self.cause(of: error))
            return
        }
        switch error.code {
        case .server:
            let sqlState = error.serverInfo?[.sqlState] ?? ""
            let message = error.serverInfo?[.message] ?? ""
            if sqlState.hasPrefix("28") {
                // 28P01 a wrong password, 28000 a role or a pg_hba.conf rule that refuses it: no
                // session can be had, however long the callers wait.
                self = .databaseUnavailable("authentication failed (SQLSTATE \(sqlState)): \(message)")
            } else if sqlState.hasPrefix("08") || ["57P01", "57P02", "57P03", "53300", "3D000"].contains(sqlState) {
                // Class 08 is a connection exception; 57P01-57P03 a server shutting down, crashed or
                // starting; 53300 a server out of connection slots; 3D000 no such database.
                self = .databaseUnavailable("SQLSTATE \(sqlState): \(message)")
            } else {
                self = .databaseError(sqlState: sqlState, message: message)
            }
        case .sslUnsupported:
            self = .databaseUnavailable("TLS: the server does not offer TLS, which the client requires")
        case .failedToAddSSLHandler, .receivedUnencryptedDataAfterSSLRequest:
            self = .databaseUnavailable("TLS: \(error.underlying.map(Self.cause(of:)) ?? "\(error.code)")")
        case .unsupportedAuthMechanism, .authMechanismRequiresPassword, .saslError:
            self = .databaseUnavailable(
                "authentication failed: \(error.code)\(error.underlying.map { ": \(Self.cause(of: $0))" } ?? "")")
        case .connectionError, .uncleanShutdown:
            self = .databaseUnavailable(error.underlying.map(Self.cause(of:)) ?? "\(error.code)")
        case .serverClosedConnection:
            self = .databaseUnavailable("the server closed the connection")
        case .clientClosedConnection:
            self = .databaseUnavailable(
                "the connection was closed on this side (the session's keep-alive or a shutdown)")
        case .poolClosed:
            self = .databaseUnavailable("the client has shut down")
        case .queryCancelled:
            self = .databaseUnavailable("the request was cancelled before a connection answered")
        default:
            self = .databaseError(sqlState: "", message: "\(error.code)")
        }
    }

    /// What a socket-level error says, in words: refused, no answer within a time, TLS, or the
    /// error's own description. `NIOConnectionError` (name resolution and each address tried)
    /// lives in NIOPosix, which this module does not import: its attempts are read by reflection.
    static func cause(of error: any Error) -> String {
        if let error = error as? IOError {
            return Self.cause(errno: error.errnoCode) ?? "\(error)"
        }
        if let error = error as? ChannelError, case .connectTimeout(let limit) = error {
            return "no answer within \(Double(limit.nanoseconds) / 1e9) s while connecting"
        }
        let type = String(reflecting: Swift.type(of: error))
        if type.contains("SSL") || type.contains("TLS") {
            return "TLS: \(error)"
        }
        let attempts = Mirror(reflecting: error).children.first { $0.label == "connectionErrors" }?.value
        if let attempts = attempts.map({ Mirror(reflecting: $0).children.map(\.value) }), !attempts.isEmpty {
            let causes = attempts.map { attempt -> String in
                let fields = Mirror(reflecting: attempt).children
                let target = fields.first { $0.label == "target" }.map { "\($0.value)" } ?? "an address"
                let failure = fields.first { $0.label == "error" }?.value as? any Error
                return "\(failure.map(Self.cause(of:)) ?? "failed") (\(target))"
            }
            return causes.joined(separator: "; ")
        }
        if String(describing: error).range(of: "connect timeout", options: .caseInsensitive) != nil {
            return "no answer in time while connecting"
        }
        return String(describing: error)
    }

    private static func cause(errno: Int32) -> String? {
        switch errno {
        case ECONNREFUSED: "the connection was refused: nothing listens at the database's address"
        case ETIMEDOUT: "no answer: the connection timed out"
        case EHOSTUNREACH, ENETUNREACH: "the database's host cannot be reached"
        case ECONNRESET: "the connection was reset"
        case EPIPE: "the connection broke"
        default: nil
        }
    }

    /// Whether the database was out of reach, the one case ``DatabaseUnavailablePolicy`` decides.
    var isUnavailable: Bool {
        if case .databaseUnavailable = self { return true }
        return false
    }
}
#endif
