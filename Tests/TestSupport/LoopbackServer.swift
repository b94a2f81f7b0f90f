import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A plain HTTP/1.1 server on 127.0.0.1, over a socket of its own, one thread per connection: a
/// real transfer for a real client (URLSession, AsyncHTTPClient), with no package behind it, so
/// that the root package's default tests stay dependency-free.
///
/// It answers each request with what its handler returns, and can stream a body as fast as the
/// loopback takes it, for ever if asked: a stream stops when the client closes the connection, when
/// the server stops, or after `LoopbackServer.streamCap` bytes, so that no test outlives its
/// server.
public final class LoopbackServer: @unchecked Sendable {
    // @unchecked: `connections`, `sent`, `closedStreams`, `received` and `stopped` are guarded by
    // `lock`; the rest is immutable.

    /// A request as the server read it.
    public struct Request: Sendable {
        /// The method: `GET`.
        public let method: String
        /// The path with its query: `/me?x=1`.
        public let path: String
        /// The header fields, names lower-cased; a repeated name keeps its last value.
        public let headers: [String: String]
        /// The body, read by its `Content-Length`.
        public let body: Data
        /// How many requests of this path the server had read, this one included: 1 for the first.
        public let sequence: Int
    }

    /// What a response's body is.
    public enum Body: Sendable {
        /// These bytes, with their `Content-Length`.
        case bytes(Data)
        /// `total` bytes, or bytes for ever if nil, written as fast as the client reads them, in
        /// chunked encoding unless `statedLength` is given.
        case stream(total: Int?, statedLength: Int?)
    }

    /// A response: its status, its header fields and its body, and what the body waits for.
    public struct Response: Sendable {
        /// The status code.
        public var status: Int
        /// Header fields besides `Content-Length` and `Transfer-Encoding`.
        public var headers: [(name: String, value: String)]
        /// The body.
        public var body: Body
        /// Opened before the body is written, the header having been sent: a body that comes late.
        public var bodyWaitsFor: Gate?

        /// Creates a response.
        ///
        /// - Parameters:
        ///   - status: The status code; 200 by default.
        ///   - headers: Header fields besides the body's length.
        ///   - body: The body; empty by default.
        ///   - bodyWaitsFor: A gate the body waits for (10 s at most), after the header is sent.
        public init(
            status: Int = 200, headers: [(name: String, value: String)] = [], body: Body = .bytes(Data()),
            bodyWaitsFor: Gate? = nil
        ) {
            (self.status, self.headers, self.body, self.bodyWaitsFor) = (status, headers, body, bodyWaitsFor)
        }

        /// A 200 with `text` as its body.
        ///
        /// - Parameters:
        ///   - text: The body, as UTF-8.
        ///   - headers: Header fields besides the body's length.
        /// - Returns: The response.
        public static func text(_ text: String, headers: [(name: String, value: String)] = []) -> Response {
            Response(headers: headers, body: .bytes(Data(text.utf8)))
        }
    }

    /// The most bytes a streamed body writes, endless ones included: 4 GiB.
    public static let streamCap = 4 << 30

    private let listener: Int32
    private let handler: @Sendable (Request) -> Response
    private let lock = NSLock()
    private var connections: Set<Int32> = []
    private var sent: [String: Int] = [:]
    private var closedStreams: [String: Int] = [:]
    private var received: [String: Int] = [:]
    private var stopped = false
    /// The port the server listens on.
    public let port: Int

    /// Starts a server on an unused port of 127.0.0.1.
    ///
    /// - Parameter handler: Answers each request, on the connection's thread; it may block.
    public init(handler: @escaping @Sendable (Request) -> Response) {
        self.handler = handler
        guard let (listener, port) = Self.listening(backlog: 64) else {
            preconditionFailure("LoopbackServer: socket, bind or listen failed")
        }
        self.listener = listener
        self.port = port
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    deinit { stop() }

    /// A TCP socket listening on an unused port of 127.0.0.1, and that port; nil if it cannot be had.
    ///
    /// - Parameter backlog: How many connections may wait to be accepted.
    /// - Returns: The socket's descriptor and its port.
    public static func listening(backlog: Int32) -> (descriptor: Int32, port: Int)? {
        let descriptor = socket(AF_INET, streamSocket, 0)
        guard descriptor >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(descriptor, backlog) == 0 else {
            _ = close(descriptor)
            return nil
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// The URL of `path` on this server.
    ///
    /// - Parameter path: The path, with its query if any.
    /// - Returns: `http://127.0.0.1:<port><path>`.
    public func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

    /// How many bytes of body the server has written for `path`.
    ///
    /// - Parameter path: The request's path.
    /// - Returns: The bytes written, every request of that path together.
    public func bodyBytesSent(_ path: String) -> Int { lock.withLock { sent[path, default: 0] } }

    /// How many requests of `path` the server has read.
    ///
    /// - Parameter path: The request's path.
    /// - Returns: The count.
    public func requestCount(_ path: String) -> Int { lock.withLock { received[path, default: 0] } }

    /// How many streamed bodies of `path` ended because the client closed the connection.
    ///
    /// - Parameter path: The request's path.
    /// - Returns: The count.
    public func streamsClosedByTheClient(_ path: String) -> Int { lock.withLock { closedStreams[path, default: 0] } }

    /// Stops listening and closes every connection; streams stop at their next write.
    public func stop() {
        // Under the lock that a socket is closed under, so that no number shut down here belongs to
        // a socket opened since.
        lock.withLock {
            guard !stopped else { return }
            stopped = true
            _ = shutdown(listener, Int32(SHUT_RDWR))
            for connection in connections { _ = shutdown(connection, Int32(SHUT_RDWR)) }
        }
    }

    #if canImport(Glibc)
    private static let streamSocket = Int32(SOCK_STREAM.rawValue)
    private static let noSignal = Int32(MSG_NOSIGNAL)
    #else
    private static let streamSocket = SOCK_STREAM
    private static let noSignal: Int32 = 0
    #endif

    private func acceptLoop() {
        defer { lock.withLock { _ = close(listener) } }
        while true {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            #if canImport(Darwin)
            var one: Int32 = 1
            setsockopt(connection, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
            #endif
            let admitted = lock.withLock {
                guard !stopped else {
                    close(connection)
                    return false
                }
                connections.insert(connection)
                return true
            }
            guard admitted else { return }
            Thread.detachNewThread { [self] in serve(connection) }
        }
    }

    /// Answers the requests of one connection, kept alive, until either side closes it.
    private func serve(_ connection: Int32) {
        defer {
            lock.withLock {
                connections.remove(connection)
                close(connection)
            }
        }
        var buffer = Data()
        while let request = read(from: connection, into: &buffer) {
            guard write(handler(request), for: request.path, to: connection) else { return }
        }
    }

    private func read(from connection: Int32, into buffer: inout Data) -> Request? {
        let separator = Data("\r\n\r\n".utf8)
        var headEnd = buffer.range(of: separator)
        while headEnd == nil {
            guard receive(from: connection, into: &buffer) else { return nil }
            headEnd = buffer.range(of: separator)
        }
        let lines = String(decoding: buffer[..<headEnd!.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let start = lines[0].split(separator: " ")
        guard start.count >= 2 else { return nil }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            headers[line[..<colon].lowercased()] = value
        }
        let length = headers["content-length"].flatMap { Int($0) } ?? 0
        while buffer.count - headEnd!.upperBound < length {
            guard receive(from: connection, into: &buffer) else { return nil }
        }
        let bodyStart = headEnd!.upperBound
        let body = buffer[bodyStart..<bodyStart + length]
        buffer = Data(buffer[(bodyStart + length)...])
        let path = String(start[1])
        let sequence = lock.withLock {
            received[path, default: 0] += 1
            return received[path]!
        }
        return Request(method: String(start[0]), path: path, headers: headers, body: Data(body), sequence: sequence)
    }

    private func receive(from connection: Int32, into buffer: inout Data) -> Bool {
        var bytes = [UInt8](repeating: 0, count: 16 << 10)
        let count = recv(connection, &bytes, bytes.count, 0)
        guard count > 0 else { return false }
        buffer.append(contentsOf: bytes[..<count])
        return true
    }

    /// Writes `response`; false if the connection is gone.
    private func write(_ response: Response, for path: String, to connection: Int32) -> Bool {
        var head = "HTTP/1.1 \(response.status) Status\r\n"
        for (name, value) in response.headers { head += "\(name): \(value)\r\n" }
        switch response.body {
        case .bytes(let data): head += "Content-Length: \(data.count)\r\n"
        case .stream(_, let stated?): head += "Content-Length: \(stated)\r\n"
        case .stream(_, nil): head += "Transfer-Encoding: chunked\r\n"
        }
        guard transmit(Data((head + "\r\n").utf8), to: connection) else { return false }
        if let gate = response.bodyWaitsFor { _ = gate.wait() }
        switch response.body {
        case .bytes(let data):
            return transmit(data, to: connection, counting: path)
        case .stream(let total, let stated):
            // In chunks of 64 KiB, the last one shorter, each framed as a chunk without a length.
            func piece(_ count: Int) -> Data {
                let bytes = Data(repeating: 0x61, count: count)
                guard stated == nil else { return bytes }
                return Data("\(String(count, radix: 16))\r\n".utf8) + bytes + Data("\r\n".utf8)
            }
            let whole = piece(64 << 10)
            let end = min(total ?? Self.streamCap, Self.streamCap)
            var written = 0
            while written < end {
                let count = min(64 << 10, end - written)
                guard transmit(count == 64 << 10 ? whole : piece(count), to: connection) else {
                    lock.withLock { closedStreams[path, default: 0] += 1 }
                    return false
                }
                written += count
                lock.withLock { sent[path, default: 0] += count }
            }
            return stated != nil || transmit(Data("0\r\n\r\n".utf8), to: connection)
        }
    }

    private func transmit(_ data: Data, to connection: Int32, counting path: String? = nil) -> Bool {
        let complete = data.withUnsafeBytes { raw -> Bool in
            var offset = 0
            while offset < raw.count {
                let count = send(connection, raw.baseAddress! + offset, raw.count - offset, Self.noSignal)
                guard count > 0 else { return false }
                offset += count
            }
            return true
        }
        if complete, let path { lock.withLock { sent[path, default: 0] += data.count } }
        return complete
    }
}
