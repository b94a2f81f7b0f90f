#if Postgres
import CoalescingPostgres
import Foundation
import PostgresNIO
import TestSupport
import XCTest

/// `coalescing-postgres-probe` started N times: N processes, each with one caller of one key.
///
/// The work of each probe appends a line `<pid> <key>` to a runs file (the counted upstream), then
/// waits at a gate (a shared advisory lock the test holds), so that the test decides when the
/// leader's work ends, and sees from the database who waits.
final class ProbeFleet {
    let runsFile: String
    private(set) var probes: [Process] = []
    private var outputs: [URL] = []
    /// The probes of the last `start`.
    private var burst = 0..<0
    private let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coalescing-fleet-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        runsFile = directory.appendingPathComponent("runs").path
    }

    deinit {
        for probe in probes where probe.isRunning { probe.terminate() }
        try? FileManager.default.removeItem(at: directory)
    }

    /// The probe next to the test binary: the test target depends on it, so `swift build
    /// --build-tests` builds it into the same products directory.
    static var executable: URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("coalescing-postgres-probe")
    }

    /// Starts `count` probes asking for `key`.
    func start(_ count: Int, key: String, table: String, gate: Int64, url: String? = nil, extra: [String] = []) throws {
        try start(count, arguments: ["--key", key, "--table", table, "--gate", String(gate)] + extra, url: url)
    }

    /// Starts `count` probes with these arguments besides the URL and the runs file.
    func start(_ count: Int, arguments: [String], url: String? = nil) throws {
        burst = probes.count..<(probes.count + count)
        for _ in 0..<count {
            let output = directory.appendingPathComponent("probe-\(outputs.count)")
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            let probe = Process()
            probe.executableURL = Self.executable
            probe.arguments = ["--url", try url ?? Database.url(), "--runs-file", runsFile] + arguments
            probe.standardOutput = try FileHandle(forWritingTo: output)
            probe.standardError = probe.standardOutput
            probe.environment = ProcessInfo.processInfo.environment.merging(["SWIFT_BACKTRACE": "enable=no"]) { $1 }
            try probe.run()
            probes.append(probe)
            outputs.append(output)
        }
    }

    /// The runs of the work so far, as the pids that ran it.
    var runs: [Int32] {
        let text = (try? String(contentsOfFile: runsFile, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { $0.split(separator: " ").first.flatMap { Int32($0) } }
    }

    /// What each probe printed: its `value:` or `error:` line, its statistics.
    func output(of index: Int) -> String {
        (try? String(contentsOf: outputs[index], encoding: .utf8)) ?? ""
    }

    /// The line each probe ended with, `value: …` or `error: …`, in order of start.
    var answers: [String] {
        probes.indices.map { index in
            output(of: index).split(separator: "\n").first { $0.hasPrefix("value: ") || $0.hasPrefix("error: ") }
                .map(String.init) ?? "no answer (\(output(of: index)))"
        }
    }

    /// Waits, at most `seconds`, until every probe has exited; fails the test otherwise, and kills
    /// what still runs, so that no caller waits forever.
    func waitForAll(seconds: Double, file: StaticString = #filePath, line: UInt = #line) async {
        await waitUntil("every probe ended", seconds: seconds, file: file, line: line) {
            try? await Task.sleep(for: .milliseconds(20))
            return !probes.contains { $0.isRunning }
        }
        for probe in probes where probe.isRunning { probe.terminate() }
    }

    /// Waits until the burst stands: `runs` runs so far, the last one at its gate, and `waiting`
    /// probes said that their step waits for another process's run.
    func waitForBurst(waiting: Int, runs: Int, file: StaticString = #filePath, line: UInt = #line) async throws {
        try await Database.withConnection { connection in
            await waitUntil("\(waiting) probes wait and one runs the work", seconds: 30, file: file, line: line) {
                try? await Task.sleep(for: .milliseconds(20))
                let gate = (try? await Database.gateWaiters(on: connection)) ?? -1
                let said = self.burst.filter { self.output(of: $0).contains("\nwaiting\n") }.count
                return said >= waiting && gate >= 1 && self.runs.count == runs
            }
        }
    }

    /// The lines of every probe, in order of start.
    var lines: [[Substring]] {
        probes.indices.map { output(of: $0).split(separator: "\n") }
    }
}

/// The gate of a fleet's work: a one-key advisory lock held by a session of the test's own.
struct FleetGate: Sendable {
    let key = Int64.random(in: 1...Int64(Int32.max))
    private let connection: PostgresConnection

    private init(connection: PostgresConnection) {
        self.connection = connection
    }

    /// Returns once the test's session holds the lock.
    static func hold() async throws -> FleetGate {
        let configuration = try PostgresClient.Configuration(coalescingURL: Database.url())
        let gate = FleetGate(
            connection: try await PostgresConnection.connect(
                configuration: .init(
                    host: configuration.host ?? "127.0.0.1", port: configuration.port ?? 5432,
                    username: configuration.username, password: nil, database: configuration.database, tls: .disable),
                id: 2, logger: Database.logger))
        _ = try await gate.connection.query("SELECT pg_advisory_lock(\(gate.key))", logger: Database.logger).collect()
        return gate
    }

    /// Ends the session, which releases the lock; a session lost in a restart is already over.
    func open() async {
        if !connection.isClosed { try? await connection.close() }
    }
}
#endif
