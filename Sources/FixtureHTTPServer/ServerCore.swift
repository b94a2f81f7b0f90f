import Dispatch
import Foundation

// Apple platforms: the socket calls come from Darwin; Linux: from Glibc.
#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif

/// The shared engine behind a ``FixtureHTTPServer``: it owns the listening socket and the server threads.
///
/// Threads capture this object rather than the public server, so dropping the last reference to the server runs its
/// `deinit`, which stops the engine.
final class ServerCore: Sendable {
    let state: ConditionLock<ServerState>
    let port: UInt16
    /// Entered for every server thread and left when it finishes, so `stop()` can wait for all of them.
    private let threads = DispatchGroup()

    init(routes: [String: FixtureResponse]) throws {
        let listener = try SocketIO.makeLoopbackListener()
        port = listener.port
        state = ConditionLock(ServerState(routes: routes))
        guard let (id, wake) = registerWakePipe() else {
            SocketIO.closeDescriptor(listener.fd)
            throw FixtureHTTPServerError(operation: "pipe", errorNumber: errno)
        }
        spawn(name: "fx\(port)-accept") { [self] in
            acceptLoop(listener: listener.fd, wake: wake, wakeID: id)
        }
    }

    /// Records an arrived request and decides its response.
    ///
    /// - Returns: The response, and the release generation it must wait past if responses are held.
    func record(_ request: FixtureRequest) -> (response: FixtureResponse, heldGeneration: Int?) {
        state.withLock { state in
            state.requests.append(request)
            let response = state.routes[request.path] ?? .status(404)
            return (response, state.isHeld ? state.releaseGeneration : nil)
        }
    }

    /// Counts a request whose client hung up before its response was written.
    func recordAbandoned() {
        state.withLock { $0.abandonedRequestCount += 1 }
    }

    /// Registers a pipe that `stop()` and `releaseResponses()` will signal.
    ///
    /// - Returns: The registration, or `nil` if the server is stopping or out of descriptors.
    func registerWakePipe() -> (id: Int, pipe: WakePipe)? {
        guard let pipe = WakePipe() else { return nil }
        let id: Int? = state.withLock { state in
            guard !state.isStopped else { return nil }
            defer { state.nextWakePipeID += 1 }
            state.wakePipes[state.nextWakePipeID] = pipe
            return state.nextWakePipeID
        }
        guard let id else {
            pipe.close()
            return nil
        }
        return (id, pipe)
    }

    /// Unregisters and closes a pipe; see ``WakePipe`` for why the order matters.
    func closeWakePipe(id: Int, pipe: WakePipe) {
        _ = state.withLock { $0.wakePipes.removeValue(forKey: id) }
        pipe.close()
    }

    /// Ends the accept loop and every connection, then waits (briefly) for their threads to finish.
    func stop() {
        state.withLock { state in
            state.isStopped = true
            state.wakeAll()
        }
        // Every thread wakes from poll() at once, so this normally returns within milliseconds; the bound only guards
        // against a thread stuck in send() to a client that stopped reading (SO_SNDTIMEO caps that too).
        _ = threads.wait(timeout: .now() + .seconds(2))
    }

    private func acceptLoop(listener: Int32, wake: WakePipe, wakeID: Int) {
        // The listener is closed here, not in stop(), so it can never be closed while poll() or accept() uses it.
        defer {
            closeWakePipe(id: wakeID, pipe: wake)
            SocketIO.closeDescriptor(listener)
        }
        while true {
            let ready = SocketIO.waitReadable([listener, wake.readEnd], timeoutMilliseconds: -1)
            if ready[1] { wake.drain() }
            if state.withLock({ $0.isStopped }) { return }
            guard ready[0] else { continue }
            while let client = SocketIO.acceptConnection(listener) {
                spawn(name: "fx\(port)-conn") { [self] in
                    serve(client)
                }
            }
        }
    }

    private func serve(_ client: Int32) {
        defer { SocketIO.closeDescriptor(client) }
        guard let (id, wake) = registerWakePipe() else { return }
        defer { closeWakePipe(id: id, pipe: wake) }
        FixtureConnection(core: self, socket: client, wake: wake).run()
    }

    /// Runs `body` on a new thread tracked by `threads`. Names carry the port, within Linux's 15-character limit, so
    /// that one server's threads can be told apart in a debugger or in `/proc`.
    private func spawn(name: String, _ body: @escaping @Sendable () -> Void) {
        threads.enter()
        let thread = Thread { [threads] in
            Self.nameCurrentThread(name)
            body()
            threads.leave()
        }
        thread.start()
    }

    /// Names the calling thread for debuggers and `/proc`.
    ///
    /// Foundation's `Thread.name` is not used because on Linux it reaches the OS thread only if the thread object has
    /// finished starting, which races with the thread's own first instructions; and Glibc's `pthread_setname_np` is not
    /// visible to Swift.
    private static func nameCurrentThread(_ name: String) {
        #if canImport(Darwin)
        pthread_setname_np(name)
        #else
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        let bytes = Array(name.utf8.prefix(15))
        _ = write(fd, bytes, bytes.count)
        SocketIO.closeDescriptor(fd)
        #endif
    }
}
