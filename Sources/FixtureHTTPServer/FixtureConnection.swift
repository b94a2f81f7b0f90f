/// Serves one accepted connection: reads one request, waits while it is held or delayed, answers, and returns.
///
/// It runs on its own thread and never closes the socket; ``ServerCore`` does that when ``run()`` returns.
struct FixtureConnection {
    /// The largest request head accepted; anything longer is answered with 431.
    private static let maximumHeadSize = 64 * 1024

    let core: ServerCore
    let socket: Int32
    let wake: WakePipe

    /// Serves the request, if one arrives; returns when the connection can be closed.
    func run() {
        switch readRequest() {
        case .none:
            return
        case .malformed(let statusCode):
            _ = SocketIO.sendAll(socket, FixtureResponse.status(statusCode).serialized())
        case .request(let request):
            let (response, heldGeneration) = core.record(request)
            guard waitUntilDue(delay: response.delay, heldGeneration: heldGeneration) else { return }
            if !SocketIO.sendAll(socket, response.serialized()) {
                core.recordAbandoned()
            }
        }
    }

    private enum ReadResult {
        case request(FixtureRequest)
        case malformed(statusCode: Int)
    }

    /// Reads the head and skips any `Content-Length` body, across as many partial reads as it takes.
    ///
    /// - Returns: The request, a status for a malformed one, or `nil` if the client left or the server stopped.
    private func readRequest() -> ReadResult? {
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        var headEnd: Int?
        while headEnd == nil {
            guard waitForClientData() else { return nil }
            let count = SocketIO.receive(socket, into: &chunk)
            guard count > 0 else { return nil }
            // Re-scan a little before the new bytes, in case the terminator straddles two reads.
            let scanStart = max(0, received.count - 3)
            received.append(contentsOf: chunk[..<count])
            headEnd = Self.headTerminator(in: received, from: scanStart)
            if headEnd == nil && received.count > Self.maximumHeadSize { return .malformed(statusCode: 431) }
        }
        guard let headEnd, let request = FixtureRequest.parse(head: received[..<headEnd]) else {
            return .malformed(statusCode: 400)
        }
        // The body is never used, but it must be consumed: closing a socket with unread data sends a reset, which
        // can destroy the response before the client reads it.
        var bodyBytesLeft = request.contentLength - (received.count - headEnd - 4)
        while bodyBytesLeft > 0 {
            guard waitForClientData() else { return nil }
            let count = SocketIO.receive(socket, into: &chunk)
            guard count > 0 else { return nil }
            bodyBytesLeft -= count
        }
        return .request(request)
    }

    /// Waits until the client socket needs attention.
    ///
    /// - Returns: `false` if the server stopped meanwhile.
    private func waitForClientData() -> Bool {
        while true {
            let ready = SocketIO.waitReadable([socket, wake.readEnd], timeoutMilliseconds: -1)
            if ready[1] { wake.drain() }
            if core.state.withLock({ $0.isStopped }) { return false }
            if ready[0] { return true }
        }
    }

    /// Waits until the request is released (if it arrived while held) and its delay has passed, watching the socket
    /// meanwhile so that a client hanging up is noticed and counted.
    ///
    /// - Returns: `true` if the response should be sent now; `false` if the client left or the server stopped.
    private func waitUntilDue(delay: Duration, heldGeneration: Int?) -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + delay
        while true {
            let (isStopped, isHeld) = core.state.withLock { state in
                (state.isStopped, heldGeneration.map { state.releaseGeneration <= $0 } ?? false)
            }
            if isStopped { return false }
            let remaining = deadline - clock.now
            if !isHeld && remaining <= .zero { return true }
            let timeout = isHeld ? -1 : Self.milliseconds(roundingUp: remaining)
            let ready = SocketIO.waitReadable([socket, wake.readEnd], timeoutMilliseconds: timeout)
            if ready[1] { wake.drain() }
            guard ready[0] else { continue }
            switch SocketIO.peerState(socket) {
            case .open:
                continue
            case .hasData:
                // Extra bytes (say, a pipelined request) are ignored; reading them keeps poll() from spinning.
                var discard = [UInt8](repeating: 0, count: 4096)
                if SocketIO.receive(socket, into: &discard) > 0 { continue }
            case .closed:
                break
            }
            // A half-close (shutdown of the client's write side) looks the same as a hang-up here; HTTP clients do
            // not half-close while waiting for a response, so this is counted as abandoned too.
            core.recordAbandoned()
            return false
        }
    }

    /// Finds the `\r\n\r\n` that ends a request head.
    ///
    /// - Returns: The index of its first byte, or `nil` if it has not arrived yet.
    private static func headTerminator(in bytes: [UInt8], from start: Int) -> Int? {
        let terminator: [UInt8] = [13, 10, 13, 10]
        let lastStart = bytes.count - terminator.count
        guard start <= lastStart else { return nil }
        for index in start...lastStart where bytes[index..<index + 4].elementsEqual(terminator) {
            return index
        }
        return nil
    }

    private static func milliseconds(roundingUp duration: Duration) -> Int32 {
        let (seconds, attoseconds) = duration.components
        let milliseconds = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: max(1, milliseconds))
    }
}
