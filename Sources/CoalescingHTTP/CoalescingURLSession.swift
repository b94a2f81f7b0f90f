import CoalescingOperations
import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A `URLSession` whose identical requests in flight are sent once, every caller receiving the
/// response and its body.
///
/// Replace `session.data(for:)` with this session's ``data(for:sharing:timeout:whenAbandoned:progress:)``:
///
/// ```swift
/// import CoalescingHTTP
/// import Foundation
///
/// #if canImport(FoundationNetworking)
/// import FoundationNetworking
/// #endif
///
/// let http = CoalescingURLSession(configuration: .default)
///
/// func profile(token: String) async throws -> Data {
///     var request = URLRequest(url: URL(string: "https://api.example.com/me")!)
///     request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
///     let (data, _) = try await http.data(for: request)  // one request for every caller with this token
///     return data
/// }
/// ```
///
/// - Which requests share is decided by their ``HTTPRequestKey``: by default only `GET` and
///   `HEAD`, with no body, and only when their method, URL, header fields (`Authorization`
///   included) and cache policy are equal. See the article "Coalescing HTTP requests".
/// - Each caller withdraws on its own: its task cancelled, or its `timeout` passed. The data task
///   is cancelled when the last caller has withdrawn, unless the request was started with
///   `whenAbandoned: .runToCompletion`.
/// - The data task runs at the priority of its most urgent caller, mapped to
///   `URLSessionTask.priority`; every caller that asks for progress receives the transfer's.
/// - A body longer than ``maximumBodySize`` stops the transfer and fails every caller with
///   ``HTTPCoalescingError/bodyTooLarge(url:limit:)``.
///
/// The session is its own: its delegate is this coalescer's, which reads the transfer as it
/// arrives. It is invalidated, letting its transfers finish, when this object goes away.
public final class CoalescingURLSession: Sendable {
    /// The session that sends the requests.
    public let session: URLSession
    /// Which methods share without a sharing key, and which header fields the key leaves out.
    public let keying: HTTPKeying
    /// The longest body a response may have, in bytes.
    public let maximumBodySize: Int
    let coalescer: InFlightTaskCoalescer<HTTPRequestKey, Loaded>
    let loads: Loads
    /// Where the session finds what it adds to a request as it sends it, which the key holds too.
    let stores: SessionStores

    /// The default ``maximumBodySize``: 32 MiB.
    public static let defaultMaximumBodySize = 32 << 20

    /// Creates a session that coalesces its identical requests.
    ///
    /// - Parameters:
    ///   - configuration: The configuration of the session to create.
    ///   - keying: Which methods share, and which header fields the key leaves out; the default is
    ///     safe (``HTTPKeying/standard``).
    ///   - maximumBodySize: The longest body a response may have, in bytes; 32 MiB by default.
    ///   - observer: Receives one ``CoalescingEvent`` per step, as a task coalescer's observer
    ///     does; its keys describe requests without header values.
    ///   - stallThreshold: Reports requests in flight this long, as a task coalescer does.
    ///   - clock: The clock that callers' timeouts and the stall threshold are measured on.
    public init<C: Clock>(
        configuration: URLSessionConfiguration = .default, keying: HTTPKeying = .standard,
        maximumBodySize: Int = defaultMaximumBodySize,
        observer: (@Sendable (CoalescingEvent<HTTPRequestKey>) -> Void)? = nil, stallThreshold: Duration? = nil,
        clock: C = ContinuousClock()
    ) where C.Duration == Duration {
        precondition(maximumBodySize >= 0, "CoalescingURLSession: maximumBodySize must not be negative")
        let loads = Loads()
        self.loads = loads
        self.keying = keying
        self.maximumBodySize = maximumBodySize
        stores = SessionStores(
            cookies: configuration.httpShouldSetCookies ? configuration.httpCookieStorage : nil,
            credentials: configuration.urlCredentialStorage)
        session = URLSession(configuration: configuration, delegate: loads, delegateQueue: nil)
        coalescer = InFlightTaskCoalescer(observer: observer, stallThreshold: stallThreshold, clock: clock)
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    /// Sends `request`, or joins the identical one in flight, and returns its response and body.
    ///
    /// - Parameters:
    ///   - request: The request. Its key decides whom it shares with: see ``key(for:sharing:)``.
    ///   - sharing: ``HTTPSharing/automatic`` (safe methods share by key), a sharing key that
    ///     opts any request in, or ``HTTPSharing/never``.
    ///   - timeout: How long this caller waits at most; the request goes on for the others.
    ///   - whenAbandoned: Whether the data task is cancelled when every caller has withdrawn (the
    ///     default), or runs to its end; read from the caller that sends the request.
    ///   - progress: Receives the transfer's progress, in bytes of the body.
    /// - Returns: The body, this caller's own, and the response, as the session received them,
    ///   whatever their status.
    /// - Throws: ``HTTPCoalescingError/invalidRequest(_:)`` at once, sending nothing;
    ///   ``HTTPCoalescingError/bodyTooLarge(url:limit:)``; the session's `URLError`;
    ///   `CancellationError` if this caller's task was cancelled; `CoalescingError.cancelled` if the
    ///   request was cancelled for everyone, through ``cancel(_:sharing:)`` or ``cancelAll()``; or
    ///   `CoalescingError.timedOut` if `timeout` passed first.
    public func data(
        for request: URLRequest, sharing: HTTPSharing = .automatic, timeout: Duration? = nil,
        whenAbandoned: AbandonedWorkPolicy = .cancel, progress: (@Sendable (WorkProgress) -> Void)? = nil
    ) async throws -> (Data, URLResponse) {
        let key = try key(for: request, sharing: sharing)
        let loaded = try await coalescer.value(
            key: key, name: key.url, timeout: timeout, whenAbandoned: whenAbandoned, progress: progress
        ) { [loads, session, maximumBodySize] in
            let reporter = ProgressReporter.current
            let task = session.dataTask(with: request)
            // The engine escalates the work's task for a more urgent caller (Guarantee 19); the
            // data task follows.
            return try await followingEscalation {
                try await withTaskCancellationHandler {
                    try await withCheckedThrowingContinuation { continuation in
                        loads.start(task, limit: maximumBodySize, progress: reporter.report) {
                            continuation.resume(with: $0)
                        }
                    }
                } onCancel: {
                    loads.cancel(task)
                }
            } raised: {
                loads.raise(task, to: Loads.sessionPriority($0))
            }
        }
        return (loaded.data, loaded.response)
    }

    /// The key `request` is coalesced under.
    ///
    /// - Parameters:
    ///   - request: The request.
    ///   - sharing: As given to ``data(for:sharing:timeout:whenAbandoned:progress:)``.
    /// - Returns: The key; one equal to no other if the request does not share.
    /// - Throws: ``HTTPCoalescingError/invalidRequest(_:)`` for a request that cannot be sent.
    public func key(for request: URLRequest, sharing: HTTPSharing = .automatic) throws -> HTTPRequestKey {
        try HTTPRequestKey(request, sharing: sharing, keying: keying, stores: stores)
    }

    /// Lets the next identical request be sent anew, while the callers already waiting keep
    /// waiting for the one in flight: use it after a write that changes what the request reads.
    ///
    /// - Parameters:
    ///   - request: The request to forget.
    ///   - sharing: As given to ``data(for:sharing:timeout:whenAbandoned:progress:)``.
    /// - Returns: Whether such a request was in flight.
    @discardableResult public func forget(_ request: URLRequest, sharing: HTTPSharing = .automatic) -> Bool {
        guard let key = try? key(for: request, sharing: sharing) else { return false }
        return coalescer.forget(key: key)
    }

    /// Cancels the request in flight for every caller, who throw ``CoalescingError/cancelled``.
    ///
    /// - Parameters:
    ///   - request: The request to cancel.
    ///   - sharing: As given to ``data(for:sharing:timeout:whenAbandoned:progress:)``.
    /// - Returns: Whether such a request was in flight.
    @discardableResult public func cancel(_ request: URLRequest, sharing: HTTPSharing = .automatic) -> Bool {
        guard let key = try? key(for: request, sharing: sharing) else { return false }
        return coalescer.cancel(key: key)
    }

    /// Cancels every request in flight, forgotten ones included.
    ///
    /// - Returns: Whether any was in flight.
    @discardableResult public func cancelAll() -> Bool { coalescer.cancelAll() }

    /// What the session has done since it was created: callers, requests sent (work started),
    /// joins, withdrawals.
    public var statistics: CoalescingStatistics { coalescer.statistics }
}

/// The session's cookie store, if it sets cookies, and its credential store: what it adds to a
/// request as it sends it.
struct SessionStores: Sendable {
    let cookies: HTTPCookieStorage?
    let credentials: URLCredentialStorage?

    /// What the session will add to `request`, as strings for the key: the store's cookies for its
    /// URL, if the request handles cookies, and the credentials stored for its host and port,
    /// which the session answers a challenge with. A response sent with either is that user's.
    func additions(to request: URLRequest) -> [String] {
        guard let url = request.url else { return [] }
        var additions: [String] = []
        // Each store is asked whether it is empty first, as it mostly is: looking a URL up costs
        // several thousand instructions a request (BENCHMARKS.md, issue 43).
        if request.httpShouldHandleCookies, let store = cookies, store.cookies?.isEmpty == false,
            let cookies = store.cookies(for: url), !cookies.isEmpty
        {
            additions.append("cookie store " + (HTTPCookie.requestHeaderFields(with: cookies)["Cookie"] ?? ""))
        }
        let spaces = credentials?.allCredentials ?? [:]
        guard !spaces.isEmpty else { return additions }
        let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
        var stored: [String] = []
        for (space, users) in spaces where space.host == url.host && space.port == port {
            for (user, credential) in users {
                stored.append("credential \(space.realm ?? "") \(user) \(credential.password ?? "")")
            }
        }
        return additions + stored.sorted()
    }
}

extension HTTPRequestKey {
    /// The key of a `URLRequest`: its cache policy, timeout and cookie handling change its answer,
    /// and so do the cookies and credentials the session adds from its stores.
    init(_ request: URLRequest, sharing: HTTPSharing, keying: HTTPKeying, stores: SessionStores) throws {
        let body: Body =
            if request.httpBodyStream != nil { .unreadable } else if let data = request.httpBody { .bytes(data) } else {
                .none
            }
        let transport =
            [
                "cache \(request.cachePolicy.rawValue)", "timeout \(request.timeoutInterval)",
                "cookies \(request.httpShouldHandleCookies)",
            ] + stores.additions(to: request)
        try self.init(
            method: request.httpMethod, url: request.url,
            headers: (request.allHTTPHeaderFields ?? [:]).map { (name: $0.key, value: $0.value) }, body: body,
            transport: transport, sharing: sharing, keying: keying)
    }
}

/// A response and its body, as every caller receives it: the body a value, each caller's own.
struct Loaded: Sendable {
    let data: Data
    let response: URLResponse
}

/// The session's delegate: each data task's transfer, read as it arrives, capped (at its stated
/// length, or as it passes the limit), reported, and handed to whoever started it.
final class Loads: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    // @unchecked: `transfers`, and each transfer's fields, are guarded by `lock`.
    private let lock = NSLock()
    /// Taken by a cancel, and by a task's completion before it forgets the transfer.
    private let ending = NSLock()
    private var transfers: [Int: Transfer] = [:]

    /// One data task's transfer. A class, so that its body grows in place: changed only under
    /// `lock`.
    private final class Transfer {
        let task: URLSessionDataTask
        let limit: Int
        let progress: @Sendable (WorkProgress) -> Void
        let completion: @Sendable (Result<Loaded, Error>) -> Void
        var response: URLResponse?
        /// The data task's priority as last written.
        var priority = URLSessionTask.defaultPriority
        var body = Data()
        /// The bytes `body` has room for: grown by doubling, never past the limit, so that a body
        /// at the limit holds no more memory than the limit.
        var room = 0
        /// Set once its callers were told the body is too large, before the task ends: what
        /// arrives after is dropped.
        var refused = false

        init(
            task: URLSessionDataTask, limit: Int, progress: @escaping @Sendable (WorkProgress) -> Void,
            completion: @escaping @Sendable (Result<Loaded, Error>) -> Void
        ) {
            (self.task, self.limit, self.progress, self.completion) = (task, limit, progress, completion)
        }

        /// Under `lock`: whether `priority` raises the data task's; never lowers it.
        func raises(to priority: Float) -> Bool {
            guard priority > self.priority else { return false }
            self.priority = priority
            return true
        }

        /// Under `lock`: the body is over the limit. Its bytes go, and what arrives after is
        /// dropped; the transfer stays until the task ends, so that `cancel(_:)` still finds it.
        func refuse() -> () -> Void {
            refused = true
            body = Data()
            let url = (response?.url ?? task.originalRequest?.url)?.absoluteString ?? ""
            let failure = HTTPCoalescingError.bodyTooLarge(url: url, limit: limit)
            return { [completion] in completion(.failure(failure)) }
        }
    }

    /// Sends `task` at `priority`, or at its task's (the current one's, raised as it is escalated)
    /// if nil, reading its body up to `limit` bytes; `completion` hears its outcome once. Inside a
    /// task already cancelled, sends nothing and fails with `CancellationError`.
    func start(
        _ task: URLSessionDataTask, priority: Float? = nil, limit: Int,
        progress: @escaping @Sendable (WorkProgress) -> Void,
        completion: @escaping @Sendable (Result<Loaded, Error>) -> Void
    ) {
        let sends = lock.withLock {
            // The flag is set before a cancellation handler runs: either it is seen here, or the
            // handler finds the transfer.
            guard !Task.isCancelled else { return false }
            let transfer = Transfer(task: task, limit: limit, progress: progress, completion: completion)
            transfers[task.taskIdentifier] = transfer
            // Read once the transfer is there: an escalation from now on finds it, and one before
            // is in the task's priority already. Each access to a task's priority waits for the
            // session's queue: a task starts at the default, left alone.
            transfer.priority = priority ?? Self.sessionPriority(Task.currentPriority)
            if transfer.priority != URLSessionTask.defaultPriority { task.priority = transfer.priority }
            return true
        }
        guard sends else { return completion(.failure(CancellationError())) }
        task.resume()
    }

    /// Raises `task`, while it is in flight, to `priority`. Written outside the lock: the write
    /// waits for the session's queue, which a transfer can hold (see `cancel(_:)`); the engine
    /// raises one work's priority from one thread at a time, so that writes keep their order.
    func raise(_ task: URLSessionDataTask, to priority: Float) {
        if lock.withLock({ transfers[task.taskIdentifier]?.raises(to: priority) ?? false }) { task.priority = priority }
    }

    /// Cancels `task` if it has not completed.
    func cancel(_ task: URLSessionDataTask) {
        // Under the lock that the task's completion takes first: FoundationNetworking traps a
        // cancel that lands after it told its delegate the task completed. Not under `lock`: a
        // cancel waits for the session's own queue, and a transfer's delegate calls, held up
        // meanwhile, held the cancel up for a second at loopback speed.
        ending.withLock {
            if lock.withLock({ transfers[task.taskIdentifier] != nil }) { task.cancel() }
        }
    }

    /// A task's priority as a session task's: high for `.high` and above, low below `.medium`.
    static func sessionPriority(_ priority: TaskPriority) -> Float {
        if priority >= .high { return URLSessionTask.highPriority }
        if priority >= .medium { return URLSessionTask.defaultPriority }
        return URLSessionTask.lowPriority
    }

    /// Tells the callers of a refused body at once, and stops its task from another queue:
    /// FoundationNetworking often ignores a cancel made inside the delegate call that delivers the
    /// body, and reads the body to its end, however long. Its cancel still waits for the session's
    /// own queue, which a transfer at loopback speed can hold for a second or two, and now and then
    /// until the body ends (Guarantee 42); what arrives meanwhile is dropped.
    private func stop(_ task: URLSessionDataTask, telling callers: () -> Void) {
        callers()
        DispatchQueue.global().async { self.cancel(task) }
    }

    // MARK: URLSessionDataDelegate

    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        // A stated length over the limit is refused as the header arrives, before any of the body.
        let refusal = lock.withLock { () -> (() -> Void)? in
            guard let transfer = transfers[dataTask.taskIdentifier], !transfer.refused else { return nil }
            transfer.response = response
            let stated = response.expectedContentLength
            guard stated <= Int64(transfer.limit) else { return transfer.refuse() }
            transfer.room = stated > 0 ? Int(stated) : 0
            transfer.body.reserveCapacity(transfer.room)
            return nil
        }
        completionHandler(refusal == nil ? .allow : .cancel)
        if let refusal { stop(dataTask, telling: refusal) }
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        enum Next {
            case report(@Sendable (WorkProgress) -> Void, WorkProgress)
            case refuse(() -> Void)
        }
        let next = lock.withLock { () -> Next? in
            guard let transfer = transfers[dataTask.taskIdentifier], !transfer.refused else { return nil }
            let needed = transfer.body.count + data.count
            // The bytes the session has read, not only those handed to this delegate so far: at
            // loopback speed the session reads far ahead of its delegate queue. Its progress, not
            // `countOfBytesReceived`, which FoundationNetworking leaves at zero until the end.
            guard needed <= transfer.limit, dataTask.progress.completedUnitCount <= Int64(transfer.limit) else {
                return .refuse(transfer.refuse())
            }
            if needed > transfer.room {
                transfer.room = min(max(needed, 2 * transfer.room), transfer.limit)
                transfer.body.reserveCapacity(transfer.room)
            }
            transfer.body.append(data)
            let total = transfer.response?.expectedContentLength ?? -1
            return .report(transfer.progress, WorkProgress(completed: Int64(transfer.body.count), total: total))
        }
        switch next {
        case .report(let report, let progress): report(progress)
        case .refuse(let refusal): stop(dataTask, telling: refusal)
        case nil: break
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        let transfer = ending.withLock { lock.withLock { transfers.removeValue(forKey: task.taskIdentifier) } }
        guard let transfer, !transfer.refused
        else { return }
        if let error {
            transfer.completion(.failure(error))
        } else if let response = transfer.response ?? task.response {
            transfer.completion(.success(Loaded(data: transfer.body, response: response)))
        } else {
            transfer.completion(.failure(URLError(.badServerResponse)))
        }
    }
}

/// Runs `operation`, calling `raised` with the current task's new priority each time it is
/// escalated, where the platform escalates tasks (Linux; Apple's from their 26 releases): as the
/// engine escalates a task coalescer's work for a more urgent caller.
func followingEscalation<T>(
    _ operation: () async throws -> T, raised: @escaping @Sendable (TaskPriority) -> Void
) async throws -> T {
    #if compiler(>=6.2)
    if #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) {
        return try await withTaskPriorityEscalationHandler(operation: operation) { raised($1) }
    }
    #endif
    return try await operation()
}
