#if Postgres
/// Why a caller of a ``PostgresCoalescer`` heard no value, beyond what any coalescer throws
/// (the work's own error, `CancellationError`, `CoalescingError.timedOut`).
public enum CoalescingPostgresError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The database could not be reached, with ``DatabaseUnavailablePolicy/fail``; the message is
    /// the connection's error.
    case databaseUnavailable(String)
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

    /// The error on one line, for logs.
    public var description: String {
        switch self {
        case .databaseUnavailable(let message): "the database is unavailable: \(message)"
        case .failedInAnotherProcess(let message): "the work failed in the process that ran it: \(message)"
        case .valueTooLarge(let bytes, let limit):
            "the value took \(bytes) bytes, more than the \(limit) bytes published across processes"
        case .undecodableValue(let message): "the value published by another process did not decode: \(message)"
        case .invalidConfiguration(let message): "invalid configuration: \(message)"
        }
    }
}
#endif
