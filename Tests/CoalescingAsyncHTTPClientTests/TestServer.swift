#if AsyncHTTPClient
import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle
import TestSupport
import XCTest

/// A Hummingbird server on 127.0.0.1 that counts the requests of each route, and holds its answers
/// at gates the test opens: the tests synchronise on what it counts and on the coalescer's
/// statistics, never on sleeps.
///
/// - `GET /hold` and `POST /hold`: held until ``hold`` opens, then `held <n>` with the request's
///   `Authorization` and `Accept-Language`, `n` the route's count when it arrived.
/// - `GET /status/{code}`: held likewise, then that status.
/// - `GET /large`: held, then 256 KiB with a `Content-Length`; `GET /chunked`: held, then 128 KiB
///   in chunks with none.
/// - `GET /slow`: 1,000 bytes, then, once ``secondHalf`` opens, 1,000 more (`Content-Length: 2000`).
/// - `GET /drop`: the start of a body, then, once ``hold`` opens, the connection closed mid-body.
/// - `GET /fast`: `fast <n>` at once.
final class TestServer: Sendable {
    private let counts = LockedBox<[String: Int]>([:])
    /// Opens the held routes' answers.
    let hold = AsyncGate()
    /// Lets `/slow` send its second half.
    let secondHalf = AsyncGate()
    private let server = LockedBox<(port: Int, group: ServiceGroup, run: Task<Void, any Error>)?>(nil)

    private struct Dropped: Error {}

    /// Where to send requests, without a trailing slash.
    var url: String { "http://127.0.0.1:\(server.value!.port)" }

    /// How many requests `route` (such as `/hold`) has received.
    func requests(_ route: String) -> Int { counts.value[route] ?? 0 }

    private func count(_ route: String) -> Int {
        counts.mutate { counts in
            counts[route, default: 0] += 1
            return counts[route]!
        }
    }

    /// Starts the server and returns once it listens.
    static func start() async throws -> TestServer {
        let server = TestServer()
        let (ports, listening) = AsyncStream.makeStream(of: Int.self)
        // Quiet: the tests read what the server counts, not its log.
        var logger = Logger(label: "test server")
        logger.logLevel = .critical
        let application = Application(
            router: server.router,
            configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                listening.yield(channel.localAddress?.port ?? 0)
                listening.finish()
            }, logger: logger)
        // No signal handlers: the test stops the server, by `stop()`.
        let group = ServiceGroup(services: [application], gracefulShutdownSignals: [], logger: logger)
        let run = Task {
            defer { listening.finish() }
            try await group.run()
        }
        for await port in ports {
            server.server.value = (port, group, run)
            return server
        }
        try await run.value
        throw CancellationError()  // the server ended without an error before it listened
    }

    /// Opens every gate, so that no answer stays held, and shuts the server down gracefully.
    func stop() async {
        hold.open()
        secondHalf.open()
        guard let (_, group, run) = server.value else { return }
        await group.triggerGracefulShutdown()
        _ = try? await run.value
    }

    private var router: Router<BasicRequestContext> {
        let router = Router()
        let held: @Sendable (Request, BasicRequestContext) async throws -> String = { [self] request, _ in
            let n = count("/hold")
            await hold.waitIgnoringCancellation()
            let authorization = request.headers[.authorization] ?? ""
            let language = request.headers[.acceptLanguage] ?? ""
            return "held \(n) \(authorization) \(language)"
        }
        router.get("hold", use: held)
        router.post("hold", use: held)
        router.get("status/:code") { [self] _, context in
            let code = try context.parameters.require("code", as: Int.self)
            _ = count("/status/\(code)")
            await hold.waitIgnoringCancellation()
            return Response(
                status: .init(code: code), body: ResponseBody(byteBuffer: ByteBuffer(string: "status \(code)")))
        }
        router.get("large") { [self] _, _ in
            _ = count("/large")
            await hold.waitIgnoringCancellation()
            return Response(status: .ok, body: ResponseBody(byteBuffer: ByteBuffer(repeating: 0x61, count: 256 << 10)))
        }
        router.get("chunked") { [self] _, _ in
            _ = count("/chunked")
            await hold.waitIgnoringCancellation()
            return Response(
                status: .ok,
                body: ResponseBody { writer in
                    for _ in 0..<8 { try await writer.write(ByteBuffer(repeating: 0x62, count: 16 << 10)) }
                    try await writer.finish(nil)
                })
        }
        router.get("slow") { [self] _, _ in
            _ = count("/slow")
            return Response(
                status: .ok,
                body: ResponseBody(contentLength: 2000) { [secondHalf] writer in
                    try await writer.write(ByteBuffer(repeating: 0x63, count: 1000))
                    await secondHalf.waitIgnoringCancellation()
                    try await writer.write(ByteBuffer(repeating: 0x64, count: 1000))
                    try await writer.finish(nil)
                })
        }
        router.get("drop") { [self] _, _ in
            _ = count("/drop")
            return Response(
                status: .ok,
                body: ResponseBody(contentLength: 2000) { [hold] writer in
                    try await writer.write(ByteBuffer(repeating: 0x65, count: 100))
                    await hold.waitIgnoringCancellation()
                    throw Dropped()
                })
        }
        router.get("fast") { [self] _, _ in "fast \(count("/fast"))" }
        return router
    }
}
/// A test case with its own server on loopback and its own client, made anew for each test.
class ServerTestCase: XCTestCase {
    var server: TestServer!
    var client: HTTPClient!

    override func setUp() async throws {
        server = try await TestServer.start()
        client = HTTPClient(eventLoopGroupProvider: .singleton)
    }

    override func tearDown() async throws {
        await server.stop()
        try await client.shutdown()
    }
}
#endif
