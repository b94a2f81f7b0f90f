// One process of the fleet load run (issue 29): the counted upstream alone, or one server instance
// that coalesces its profile loads across processes through PostgreSQL (or per process only, for
// comparison). Benchmarks/Scripts/server-fleet-load.py starts one upstream and 4 instances.
import AsyncHTTPClient
import CoalescingOperations
import CoalescingPostgres
import Foundation
import Hummingbird
import Logging
import ProfileServer
import ProfileUpstream
import ServerSupport

let usage = """
    usage: profile-fleet upstream [--latency-ms N]
             the upstream on a free loopback port; GET /counts answers how many loads it started
           profile-fleet serve --upstream URL --postgres URL [--table NAME] [--per-process]
             one instance: GET /profiles/{id}, coalesced across processes (or per process only)
    each prints its URL on its first line
    """

var arguments = Array(CommandLine.arguments.dropFirst())
let mode = arguments.isEmpty ? "" : arguments.removeFirst()
var options: [String: String] = [:]
while let name = arguments.first {
    arguments.removeFirst()
    options[String(name.dropFirst(2))] =
        name == "--per-process" ? "yes" : (arguments.isEmpty ? "" : arguments.removeFirst())
}
var quiet = Logger(label: "profile-fleet")
quiet.logLevel = .warning

/// Says a line at once, unbuffered: the script reads the URL while the process runs.
func say(_ line: String) { FileHandle.standardOutput.write(Data("\(line)\n".utf8)) }

switch mode {
case "upstream":
    let upstream = ProfileUpstream(latency: .milliseconds(Int(options["latency-ms"] ?? "") ?? 50))
    let router = upstream.router
    router.get("/counts") { _, _ in "\(upstream.counts.value.started)" }
    let server = try await RunningServer.start(router, logger: quiet)
    say("upstream: \(server.url)")
    try await server.waitUntilStopped()
case "serve":
    guard let upstreamURL = options["upstream"], let postgres = options["postgres"] else {
        FileHandle.standardError.write(Data("\(usage)\n".utf8))
        exit(2)
    }
    let client = HTTPClient()
    let load: @Sendable (String) async throws -> Profile = { id in
        let response = try await client.execute(
            HTTPClientRequest(url: "\(upstreamURL)/profiles/\(id)"), timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 20)
        return try JSONDecoder().decode(Profile.self, from: Data(body.readableBytesView))
    }
    let profile: @Sendable (String) async throws -> Profile
    if options["per-process"] != nil {
        let local = InFlightTaskCoalescer<String, Profile>()
        profile = { id in try await local.value(key: id, timeout: .seconds(5)) { try await load(id) } }
    } else {
        var configuration = PostgresCoalescerConfiguration()
        configuration.table = options["table"] ?? configuration.table
        let fleet = try PostgresCoalescer<Profile>(url: postgres, configuration: configuration, logger: quiet)
        // The coalescer's session runs beside the server; the process ends with the load run.
        Task { try await fleet.run() }
        profile = { id in try await fleet.value(key: "profile:\(id)", timeout: .seconds(5)) { try await load(id) } }
    }
    let router = Router()
    router.get("/profiles/{id}") { _, context in try await profile(context.parameters.require("id")) }
    let server = try await RunningServer.start(router, logger: quiet)
    say("server: \(server.url)")
    try await server.waitUntilStopped()
default:
    FileHandle.standardError.write(Data("\(usage)\n".utf8))
    exit(2)
}
