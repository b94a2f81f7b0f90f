import AsyncHTTPClient
import Foundation
import Logging
import ProfileServer
import ProfileUpstream
import ServerSupport

// Runs the upstream on a free loopback port and the profile server in front of it, to try with
// curl; stop it with Ctrl-C.
let usage = """
    usage: profile-server [--port N] [--latency-ms N] [--timeout-ms N] [--no-coalescing]
      --port N         the server's port on 127.0.0.1 (default 8080; 0 picks a free one)
      --latency-ms N   how long each upstream load takes (default 200)
      --timeout-ms N   how long a request waits before it answers 504 (default 2000)
      --no-coalescing  every request loads from the upstream
    then: curl http://127.0.0.1:8080/profiles/ada and curl http://127.0.0.1:8080/statistics
    """

var port = 8080
var latency = 200
var timeout = 2000
var coalescing = true
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--no-coalescing": coalescing = false
    case "--port", "--latency-ms", "--timeout-ms":
        guard let value = arguments.popFirst().flatMap(Int.init), value >= 0 else {
            FileHandle.standardError.write(Data("profile-server: \(argument) needs a whole number\n\(usage)\n".utf8))
            exit(2)
        }
        if argument == "--port" {
            port = value
        } else if argument == "--latency-ms" {
            latency = value
        } else {
            timeout = value
        }
    case "--help", "-h":
        print(usage)
        exit(0)
    default:
        FileHandle.standardError.write(Data("profile-server: unknown option \(argument)\n\(usage)\n".utf8))
        exit(2)
    }
}

var quiet = Logger(label: "upstream")
quiet.logLevel = .warning
let upstream = ProfileUpstream(latency: .milliseconds(latency))
let upstreamServer = try await RunningServer.start(upstream.router, logger: quiet)
let client = HTTPClient()
let loader = ProfileLoader(
    options: .init(upstream: upstreamServer.url, timeout: .milliseconds(timeout), coalescing: coalescing),
    client: client)
let server = try await RunningServer.start(
    makeRouter(loader: loader), port: port, logger: Logger(label: "profile-server"))
// Unbuffered, so that the line shows at once even when standard output is a pipe.
FileHandle.standardOutput.write(
    Data("profile-server: \(server.url)/profiles/{id}, loading from \(upstreamServer.url) in \(latency) ms\n".utf8))
try await server.waitUntilStopped()
