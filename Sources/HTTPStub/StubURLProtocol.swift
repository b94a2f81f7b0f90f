import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The `URLProtocol` that hands a configured session's requests to the ``HTTPStub`` of their host.
///
/// The session creates one per request, and calls `startLoading()` then, if it cancels the
/// request, `stopLoading()`, one after the other on its own queue.
final class StubURLProtocol: URLProtocol {
    private var exchange: StubExchange?

    // MARK: The stubs, by host

    private final class Registry: @unchecked Sendable {
        // @unchecked: `stubs` and `lastHost` are guarded by `lock`.
        private let lock = NSLock()
        private var stubs: [String: Weak] = [:]
        private var lastHost = 0

        private struct Weak {
            weak var stub: HTTPStub?
        }

        func reserveHost() -> String {
            lock.withLock {
                lastHost += 1
                return "stub-\(lastHost).invalid"
            }
        }

        func register(_ stub: HTTPStub, host: String) {
            lock.withLock { stubs[host] = Weak(stub: stub) }
        }

        func stub(host: String) -> HTTPStub? {
            lock.withLock { stubs[host]?.stub }
        }
    }

    private static let registry = Registry()

    /// A host no other stub has, such as `stub-3.invalid`.
    static func reserveHost() -> String {
        registry.reserveHost()
    }

    /// Sends the requests for `host` to `stub`, for as long as the stub exists.
    static func register(_ stub: HTTPStub, host: String) {
        registry.register(stub, host: host)
    }

    // MARK: URLProtocol

    override class func canInit(with request: URLRequest) -> Bool {
        true  // only configured sessions have this class, and they only talk to stubs
    }

    override class func canonicalRequest(for request: URLRequest) -> URLRequest {
        request
    }

    override func startLoading() {
        let url = request.url ?? URL(string: "http://unknown.invalid")!
        let stub = url.host.flatMap(Self.registry.stub(host:))
        let exchange = StubExchange(loader: self, url: url, stub: stub)
        self.exchange = exchange
        guard let stub else {
            return exchange.fail(URLError(.cannotConnectToHost))
        }
        stub.receive(exchange)
    }

    override func stopLoading() {
        exchange?.stop()
    }
}

/// One request between its session and its stub: answered, failed or stopped once, whichever
/// comes first.
final class StubExchange: @unchecked Sendable {
    // @unchecked: `pendingAnswer` and `isDone` are guarded by `lock`. `loader`, a URLProtocol,
    // is not Sendable: its client is only called on `queue`, where the session calls the loader.
    private let lock = NSLock()
    private var pendingAnswer: DispatchWorkItem?
    private var isDone = false
    private let loader: StubURLProtocol
    private weak var stub: HTTPStub?
    /// Where the session's client is called: see ``queue(of:)``.
    private let queue: DispatchQueue
    /// The request's URL.
    let url: URL
    /// The request's method.
    var method: String { loader.request.httpMethod ?? "GET" }
    /// The session's task for the request, if the session said.
    var task: URLSessionTask? { loader.task }

    init(loader: StubURLProtocol, url: URL, stub: HTTPStub?) {
        self.loader = loader
        self.url = url
        self.stub = stub
        queue = Self.queue(of: loader.task)
    }

    /// Answers `response` after its delay, unless the session has stopped loading by then.
    func answer(_ response: StubResponse) {
        let item = DispatchWorkItem { [self] in
            // The answer goes out whole, under the lock that `stop()` takes: a session that
            // cancels meanwhile is never called back after it stopped loading.
            claimed { client in
                let head = HTTPURLResponse(
                    url: url, statusCode: response.statusCode, httpVersion: "HTTP/1.1", headerFields: response.headers)!
                client.urlProtocol(loader, didReceive: head, cacheStoragePolicy: .notAllowed)
                let partSize = max(1, (response.body.count + response.parts - 1) / response.parts)
                var offset = response.body.startIndex
                while offset < response.body.endIndex {
                    let end = min(offset + partSize, response.body.endIndex)
                    client.urlProtocol(loader, didLoad: response.body.subdata(in: offset..<end))
                    offset = end
                }
                client.urlProtocolDidFinishLoading(loader)
            }
        }
        lock.withLock { pendingAnswer = item }
        let (seconds, attoseconds) = response.delay.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        queue.asyncAfter(deadline: .now() + .nanoseconds(nanoseconds), execute: item)
    }

    /// Fails the request with `error`, unless it is already answered or stopped.
    func fail(_ error: URLError) {
        queue.async { [self] in
            claimed { client in client.urlProtocol(loader, didFailWithError: error) }
        }
    }

    /// The session cancelled the request: the stub counts it as abandoned if it was not answered.
    func stop() {
        let wasPending = lock.withLock {
            pendingAnswer?.cancel()
            defer { isDone = true }
            return !isDone
        }
        if wasPending {
            stub?.abandon(self)
        }
    }

    /// Calls the session's client under the lock, if this call is the one that ends the request.
    private func claimed(_ body: (any URLProtocolClient) -> Void) {
        lock.withLock {
            guard !isDone else { return }
            isDone = true
            if let client = loader.client { body(client) }
        }
    }

    /// The serial queue FoundationNetworking runs `task` on, where it calls `startLoading()` and
    /// `stopLoading()`, or a queue of the exchange's own where there is none to find.
    ///
    /// FoundationNetworking's client reads and writes the session's table of tasks unlocked,
    /// trusting to be called on that queue: called from another thread while the session adds or
    /// removes another task, it crashed the test process now and then. The queue is an internal
    /// property, found by reflection: if it goes, `testManyRequestsOfOneSessionAnsweredAndCancelled…`
    /// crashes again. Apple's Foundation reflects nothing of its tasks, and its client may be
    /// called from any thread.
    static func queue(of task: URLSessionTask?) -> DispatchQueue {
        var mirror = task.map { Mirror(reflecting: $0) }
        while let type = mirror {
            if let queue = type.children.first(where: { $0.label == "workQueue" })?.value as? DispatchQueue {
                return queue
            }
            mirror = type.superclassMirror
        }
        return DispatchQueue(label: "HTTPStub.exchange")
    }
}
