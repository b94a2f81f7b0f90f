// One caller of a PostgresCoalescer in a process of its own, for the multi-process tests and by
// hand: asks for one key, counts its runs of the work in a file, and prints what it got.
#if Postgres
import CoalescingOperations
import CoalescingPostgres
import Foundation
import Logging
import PostgresNIO

let usage = """
    usage: coalescing-postgres-probe --url URL --key KEY --runs-file PATH [--table NAME] [--gate N]
                                     [--timeout-ms N] [--when-unavailable run-locally|fail]
      --runs-file PATH  each run of the work appends a line "<pid> <key>" here
      --gate N          the work waits until it can share the advisory lock N (a test holds it)
    or, as one instance of the fleet load run (--key is then ignored):
           coalescing-postgres-probe --url URL --runs-file PATH --load-start EPOCH-MS --bursts N --callers N
                                     --interval-ms N --work-ms N [--per-process]
      --per-process     coalesce within this process only (an InFlightTaskCoalescer), for comparison
    prints "ready" once its caller waits, then "value: <value>" or "error: <error>", then its statistics
    """

var options: [String: String] = [:]
var arguments = CommandLine.arguments.dropFirst()
while let name = arguments.popFirst() {
    guard name.hasPrefix("--"), let value = arguments.popFirst() else {
        FileHandle.standardError.write(Data("\(usage)\n".utf8))
        exit(2)
    }
    options[String(name.dropFirst(2))] = value
}
guard let url = options["url"], let runsFile = options["runs-file"] else {
    FileHandle.standardError.write(Data("\(usage)\n".utf8))
    exit(2)
}

enum Probe {
    /// Appends one line with O_APPEND, whole: the probes of one test write to one file at once.
    static func appendLine(_ line: String, to path: String) {
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT, 0o644)
        guard descriptor >= 0 else { fatalError("cannot open \(path)") }
        let bytes = Array("\(line)\n".utf8)
        _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
    }

    /// Waits for the test's gate: a shared advisory lock the test holds exclusively until it lets the
    /// work end. A database that cannot be reached opens the gate, as the fault tests need.
    static func waitForGate(_ gate: Int64, configuration: PostgresCoalescerConfiguration, logger: Logger) async {
        do {
            let connection = try await PostgresConnection.connect(
                configuration: configuration.connection, id: 0, logger: logger)
            _ = try? await connection.query("SELECT pg_advisory_lock_shared(\(gate))", logger: logger).collect()
            if !connection.isClosed { try await connection.close() }
        } catch {
            FileHandle.standardOutput.write(Data("gate: \(String(reflecting: error))\n".utf8))
        }
    }
}

var logger = Logger(label: "probe")
logger.logLevel = .error
var configuration = try PostgresCoalescerConfiguration(url: url)
configuration.table = options["table"] ?? configuration.table
configuration.whenDatabaseUnavailable = options["when-unavailable"] == "fail" ? .fail : .runLocally
let coalescer = try PostgresCoalescer<String>(configuration: configuration, logger: logger)
/// Writes a line unbuffered: the tests read it while the probe may still run, or after it was killed.
func say(_ line: String) { FileHandle.standardOutput.write(Data("\(line)\n".utf8)) }

if let start = options["load-start"].flatMap(Double.init) {
    let number = { (name: String) in Int(options[name] ?? "") ?? 0 }
    let load = FleetLoad(
        start: Date(timeIntervalSince1970: start / 1000), bursts: number("bursts"), callers: number("callers"),
        interval: .milliseconds(number("interval-ms")), work: .milliseconds(number("work-ms")), runsFile: runsFile)
    if options["per-process"] != nil {
        let local = InFlightTaskCoalescer<String, String>()
        try await load.run({ try await local.value(key: $0, operation: $1) }, ranHere: { local.statistics.workStarted })
    } else {
        try await load.run(
            { try await coalescer.value(key: $0, operation: $1) }, ranHere: { coalescer.statistics.runsHere })
    }
    say("statistics: \(coalescer.statistics)")
    exit(0)
}
guard let key = options["key"] else {
    FileHandle.standardError.write(Data("\(usage)\n".utf8))
    exit(2)
}
let gate = options["gate"].flatMap(Int64.init)
let timeout = options["timeout-ms"].flatMap(Int.init).map { Duration.milliseconds($0) }
let pid = ProcessInfo.processInfo.processIdentifier
say("ready \(pid)")
let work = { @Sendable [configuration, logger] in
    Probe.appendLine("\(pid) \(key)", to: runsFile)
    if let gate { await Probe.waitForGate(gate, configuration: configuration, logger: logger) }
    return "value of \(key)"
}
do {
    let value = try await coalescer.value(key: key, timeout: timeout, operation: work)
    say("value: \(value)")
} catch {
    say("error: \(error)")
}
say("statistics: \(coalescer.statistics)")
// Explicitly: a probe returning from its top level was once seen stuck in the main thread's
// thread-specific-data destructors, after a database restart.
exit(0)
#else
print("coalescing-postgres-probe: built without the Postgres trait; build with --traits Postgres")
#endif
