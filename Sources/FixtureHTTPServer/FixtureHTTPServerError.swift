// Apple platforms: the socket calls come from Darwin; Linux: from Glibc.
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// An error thrown when a ``FixtureHTTPServer`` cannot be started.
public struct FixtureHTTPServerError: Error, Equatable, CustomStringConvertible {
    /// The system call that failed, such as `"bind"` or `"listen"`.
    public let operation: String

    /// The `errno` value the failed call left behind.
    public let errorNumber: Int32

    /// Creates an error for a failed system call.
    ///
    /// - Parameters:
    ///   - operation: The system call that failed.
    ///   - errorNumber: The `errno` value it reported.
    public init(operation: String, errorNumber: Int32) {
        self.operation = operation
        self.errorNumber = errorNumber
    }

    /// A human-readable description naming the call and the system's message for the error number.
    public var description: String {
        "FixtureHTTPServer: \(operation) failed: \(String(cString: strerror(errorNumber))) (errno \(errorNumber))"
    }
}
