// Apple platforms: the socket calls come from Darwin; Linux: from Glibc.
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// Thin wrappers over the BSD socket calls the server needs, hiding the Darwin/Glibc differences.
enum SocketIO {
    /// What a readiness check on a client socket found.
    enum PeerState {
        /// Nothing to read and the peer is still connected.
        case open
        /// The peer sent bytes that are waiting to be read.
        case hasData
        /// The peer closed or reset the connection.
        case closed
    }

    /// Creates a listening TCP socket on 127.0.0.1 with a kernel-chosen port.
    ///
    /// - Returns: The socket and the port it is bound to.
    /// - Throws: ``FixtureHTTPServerError`` naming the call that failed.
    static func makeLoopbackListener() throws -> (fd: Int32, port: UInt16) {
        #if canImport(Darwin)
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #else
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        guard fd >= 0 else { throw FixtureHTTPServerError(operation: "socket", errorNumber: errno) }
        do {
            var reuse: Int32 = 1
            let reuseSize = socklen_t(MemoryLayout<Int32>.size)
            try check("setsockopt", setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, reuseSize))
            setCloseOnExec(fd)

            var address = sockaddr_in()
            #if canImport(Darwin)
            address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
            #endif
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = 0  // Let the kernel pick a free port.
            address.sin_addr = in_addr(s_addr: in_addr_t(0x7F00_0001).bigEndian)
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
            }
            try check("bind", bound)
            try check("listen", listen(fd, 128))
            let named = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            try check("getsockname", named)
            // Non-blocking so that a connection reset between poll() and accept() cannot block the accept loop.
            setNonBlocking(fd, true)
            return (fd, UInt16(bigEndian: address.sin_port))
        } catch {
            closeDescriptor(fd)
            throw error
        }
    }

    /// Accepts a pending connection and prepares it for blocking I/O.
    ///
    /// - Returns: The connected socket, or `nil` if no connection was pending or accepting failed.
    static func acceptConnection(_ listener: Int32) -> Int32? {
        while true {
            let fd = accept(listener, nil, nil)
            if fd >= 0 {
                // Darwin lets accepted sockets inherit O_NONBLOCK from the listener; the connection code expects blocking.
                setNonBlocking(fd, false)
                setCloseOnExec(fd)
                #if canImport(Darwin)
                var noSignal: Int32 = 1
                _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &noSignal, socklen_t(MemoryLayout<Int32>.size))
                #endif
                // A client that stops reading must not pin a connection thread in send() forever.
                var sendTimeout = timeval(tv_sec: 5, tv_usec: 0)
                _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &sendTimeout, socklen_t(MemoryLayout<timeval>.size))
                return fd
            }
            if errno == EINTR || errno == ECONNABORTED { continue }
            return nil
        }
    }

    /// Waits until any of `descriptors` is readable, hung up or in error, or until the timeout passes.
    ///
    /// - Parameters:
    ///   - descriptors: The descriptors to watch.
    ///   - timeoutMilliseconds: How long to wait; `-1` waits without limit.
    /// - Returns: For each descriptor, whether it needs attention; all `false` on timeout.
    static func waitReadable(_ descriptors: [Int32], timeoutMilliseconds: Int32) -> [Bool] {
        var pollDescriptors = descriptors.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        while true {
            let result = poll(&pollDescriptors, nfds_t(pollDescriptors.count), timeoutMilliseconds)
            if result >= 0 { break }
            // A signal interrupted the wait; restarting with the full timeout is fine for a test server.
            if errno != EINTR { break }
        }
        let attention = Int16(POLLIN) | Int16(POLLHUP) | Int16(POLLERR) | Int16(POLLNVAL)
        return pollDescriptors.map { $0.revents & attention != 0 }
    }

    /// Reads at most `buffer.count` bytes, retrying on `EINTR`.
    ///
    /// - Returns: The number of bytes read, `0` at end of stream, or `-1` on error.
    static func receive(_ fd: Int32, into buffer: inout [UInt8]) -> Int {
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count >= 0 || errno != EINTR { return count }
        }
    }

    /// Checks without blocking or consuming data whether the peer has closed the connection.
    static func peerState(_ fd: Int32) -> PeerState {
        var byte: UInt8 = 0
        while true {
            let count = recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
            if count > 0 { return .hasData }
            if count == 0 { return .closed }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .open
            default: return .closed
            }
        }
    }

    /// Writes all of `bytes`, tolerating partial writes, without raising `SIGPIPE` if the peer is gone.
    ///
    /// - Returns: Whether every byte was handed to the kernel.
    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        #if canImport(Darwin)
        let flags: Int32 = 0  // SO_NOSIGPIPE is set on accept instead.
        #else
        let flags = Int32(MSG_NOSIGNAL)
        #endif
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, flags) }
            if count > 0 {
                offset += count
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                return false
            }
        }
        return true
    }

    /// Creates a pipe whose ends are close-on-exec and whose write end never blocks.
    ///
    /// - Returns: The read and write ends, or `nil` if the process is out of descriptors.
    static func makePipe() -> (read: Int32, write: Int32)? {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { return nil }
        setCloseOnExec(ends[0])
        setCloseOnExec(ends[1])
        setNonBlocking(ends[0], true)
        setNonBlocking(ends[1], true)
        return (ends[0], ends[1])
    }

    /// Writes one byte to a non-blocking descriptor, ignoring a full pipe (it is readable then anyway).
    static func writeByte(_ fd: Int32) {
        var byte: UInt8 = 1
        _ = write(fd, &byte, 1)
    }

    /// Reads and discards everything currently buffered on a non-blocking descriptor.
    static func drain(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64)
        while buffer.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }

    /// Closes a descriptor.
    static func closeDescriptor(_ fd: Int32) {
        #if canImport(Darwin)
        _ = Darwin.close(fd)
        #else
        _ = Glibc.close(fd)
        #endif
    }

    private static func check(_ operation: String, _ result: Int32) throws {
        if result != 0 { throw FixtureHTTPServerError(operation: operation, errorNumber: errno) }
    }

    private static func setNonBlocking(_ fd: Int32, _ nonBlocking: Bool) {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0 else { return }
        _ = fcntl(fd, F_SETFL, nonBlocking ? flags | O_NONBLOCK : flags & ~O_NONBLOCK)
    }

    private static func setCloseOnExec(_ fd: Int32) {
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    }
}
