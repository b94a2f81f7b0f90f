import ProfileUpstream
import XCTest

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// A route that withdraws its request when the client disconnects (Guarantees 5 and 14, as in
// DisconnectTests) keeps the client's connection open: two requests, one after the other, on one
// TCP connection are both answered, and neither answer says `Connection: close`.
final class KeepAliveTests: XCTestCase {
    func testTwoRequestsOnOneConnectionAreBothAnsweredAndTheConnectionStaysOpen() async throws {
        let harness = try await ServerHarness.start(upstream: ProfileUpstream())
        let connection = try Connection(port: harness.port)
        defer { connection.close() }

        for id in ["ada", "grace"] {
            let head = try connection.exchange("GET /profiles/\(id) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            XCTAssertTrue(head.hasPrefix("HTTP/1.1 200"), head)
            XCTAssertFalse(head.lowercased().contains("connection: close"), head)
        }
        XCTAssertEqual(harness.upstream.counts.value.answered, 2)
        try await harness.stop()
    }
}

/// Test equipment: one blocking TCP connection to 127.0.0.1, to send requests on one connection
/// as a keep-alive client does, which AsyncHTTPClient's pool does not promise.
private final class Connection {
    private let socket: Int32

    init(port: Int) throws {
        #if canImport(Glibc)
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        socket = Darwin.socket(AF_INET, SOCK_STREAM, 0)
        #endif
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard socket >= 0, connected == 0 else { throw POSIXError(.ECONNREFUSED) }
    }

    /// Sends `request` and returns the answer's head, once its body (`Content-Length` bytes) is read.
    func exchange(_ request: String) throws -> String {
        _ = request.utf8CString.withUnsafeBufferPointer { send(socket, $0.baseAddress, $0.count - 1, 0) }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let text = String(decoding: received, as: UTF8.self)
            if let end = text.range(of: "\r\n\r\n") {
                let head = String(text[..<end.lowerBound])
                let length =
                    head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                if text.utf8.count - text.utf8.distance(from: text.startIndex, to: end.upperBound) >= length {
                    return head
                }
            }
            let count = recv(socket, &buffer, buffer.count, 0)
            guard count > 0 else { throw POSIXError(.ECONNRESET) }  // the server closed the connection
            received += buffer[..<count]
        }
    }

    func close() {
        #if canImport(Glibc)
        _ = Glibc.close(socket)
        #else
        _ = Darwin.close(socket)
        #endif
    }
}
