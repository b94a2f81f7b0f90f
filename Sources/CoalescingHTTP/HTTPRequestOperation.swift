import CoalescingOperations
import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An operation that sends one HTTP request and decodes its response: the subclass-per-endpoint
/// form, for an ``OperationQueueManager``. Its identifier is the request's ``HTTPRequestKey``, so
/// identical requests coalesce by the same rules as ``CoalescingURLSession``'s, and it loads
/// through that session: its body limit, its progress, its priority.
///
/// ```swift
/// import CoalescingHTTP
/// import CoalescingOperations
/// import Foundation
///
/// #if canImport(FoundationNetworking)
/// import FoundationNetworking
/// #endif
///
/// struct Me: Decodable, Sendable {
///     let name: String
/// }
///
/// final class MeRequest: HTTPRequestOperation<Me>, @unchecked Sendable {
///     init(token: String, http: CoalescingURLSession) throws {
///         var request = URLRequest(url: URL(string: "https://api.example.com/me")!)
///         request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
///         try super.init(request: request, session: http) { data, _ in
///             try JSONDecoder().decode(Me.self, from: data)
///         }
///     }
/// }
///
/// let http = CoalescingURLSession()
/// let me = try await OperationQueueManager().value(of: try MeRequest(token: "…", http: http))
/// ```
///
/// The data task runs at the priority the operation has when it starts (its quality of service,
/// raised by its callers while it waited), and is cancelled with the operation.
open class HTTPRequestOperation<Value: Sendable>: CoalescibleOperation<Value>, @unchecked Sendable {
    // @unchecked: `task` is guarded by `lock`; the other properties are immutable.

    /// The request the operation sends.
    public let request: URLRequest
    /// The key the operation coalesces under; its ``HTTPRequestKey/identifier`` is the
    /// operation's identifier.
    public let key: HTTPRequestKey
    private let http: CoalescingURLSession
    private let decode: @Sendable (Data, URLResponse) throws -> Value
    private let lock = NSLock()
    private var task: URLSessionDataTask?

    /// Creates an operation that sends `request` through `session`, or throws at once for a
    /// request that cannot be sent.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - session: The coalescing session whose session, keying and body limit it uses.
    ///   - sharing: Whether, and under what key, the request shares: see ``HTTPSharing``.
    ///   - callBackQueue: Where `completionHandler` runs; nil runs it where the work ends.
    ///   - completionHandler: Called once with the decoded value, or the failure.
    ///   - decode: Turns the response, whatever its status, into the value; what it throws is the
    ///     work's error, for every caller.
    /// - Throws: ``HTTPCoalescingError/invalidRequest(_:)``.
    public init(
        request: URLRequest, session: CoalescingURLSession, sharing: HTTPSharing = .automatic,
        callBackQueue: OperationQueue? = nil, completionHandler: (@Sendable (Result<Value, Error>) -> Void)? = nil,
        decode: @escaping @Sendable (Data, URLResponse) throws -> Value
    ) throws {
        key = try session.key(for: request, sharing: sharing)
        self.request = request
        self.http = session
        self.decode = decode
        super.init(identifier: key.identifier, callBackQueue: callBackQueue, completionHandler: completionHandler)
    }

    /// Sends the request; its outcome, decoded, finishes the operation.
    open override func main() {
        let task = http.session.dataTask(with: request)
        // Checked under the lock that `cancel()` takes after marking the operation cancelled, so
        // that a cancel racing this start either finds the task or keeps it from being sent.
        let sends = lock.withLock {
            guard !isCancelled else { return false }
            self.task = task
            return true
        }
        guard sends else { return }
        http.loads.start(
            task, priority: Self.sessionPriority(qualityOfService), limit: http.maximumBodySize,
            progress: report(progress:)
        ) { [decode] in
            let result = $0.flatMap { loaded in Result { try decode(loaded.data, loaded.response) } }
            self.finish(result: result)
        }
    }

    /// Cancels the work for every caller and its data task; for an operation that joined other
    /// work, withdraws its caller only.
    open override func cancel() {
        super.cancel()
        if let task = lock.withLock({ task }) { http.loads.cancel(task) }
    }

    private static func sessionPriority(_ service: QualityOfService) -> Float {
        switch service {
        case .userInteractive, .userInitiated: URLSessionTask.highPriority
        case .utility, .background: URLSessionTask.lowPriority
        default: URLSessionTask.defaultPriority
        }
    }
}
