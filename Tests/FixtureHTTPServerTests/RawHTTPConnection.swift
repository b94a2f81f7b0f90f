// Apple platforms: the socket calls come from Darwin; Linux: from Glibc.
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// A bare TCP client, for sending a request in arbitrary pieces, which URLSession cannot do.
final class RawHTTPConnection {
    private let fd: Int32

    init?(port: UInt16) {
        #if canImport(Darwin)
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #else
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        #if canImport(Darwin)
        address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
        #endif
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr = in_addr(s_addr: in_addr_t(0x7F00_0001).bigEndian)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            _ = close(fd)
            return nil
        }
        var noDelay: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, socklen_t(MemoryLayout<Int32>.size))
        self.fd = fd
    }

    deinit {
        _ = close(fd)
    }

    /// Sends all of `text`.
    func send(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            #if canImport(Darwin)
            let flags: Int32 = 0
            #else
            let flags = Int32(MSG_NOSIGNAL)
            #endif
            let count = bytes.withUnsafeBytes { sendBytes(fd, $0.baseAddress! + offset, $0.count - offset, flags) }
            guard count > 0 else { return false }
            offset += count
        }
        return true
    }

    /// Reads until the server closes the connection, giving up after five seconds of silence.
    func readToEnd() -> String {
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            received.append(contentsOf: buffer[..<count])
        }
        return String(decoding: received, as: UTF8.self)
    }
}

// Apple platforms: send(2) from Darwin; Linux: from Glibc.
#if canImport(Darwin)
private let sendBytes = Darwin.send
#else
private let sendBytes = Glibc.send
#endif
