#if Postgres
import Foundation
import NIOCore
import PostgresNIO

// What the database stack threw, sorted into an outage or an error the callers should see, with its
// cause in words. Apart from the error itself, which the state machines carry and which imports
// nothing, so that .ci/session-explorer-catches compiles them without the database packages.
extension CoalescingPostgresError {
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
}
#endif
