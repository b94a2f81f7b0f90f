// One process of a fleet sharing a PostgresCoalescer's table, for the multi-process tests, the
// fleet load run and the fleet benchmark: asks for keys, counts its runs of the work in a file, and
// prints what it got.
#if Postgres
import CoalescingOperations
import CoalescingPostgres
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

let usage = """
    usage: coalescing-postgres-probe --url URL --runs-file PATH [--table NAME] [--when-unavailable run-locally|fail]
                                     [--connections N] [--work-ms N] [--log-level LEVEL] MODE
      --runs-file PATH  each run of the work appends a line "<pid> <key>" here
      --log-level LEVEL the coalescer's and its client's log level (swift-log's names), error by default
    MODE, one of:
      --key KEY [--gate N] [--timeout-ms N] [--forget-after-ms N]
                        one caller of KEY; the work waits until it can share the advisory lock N (a
                        test holds it); prints "ready", "waiting" once its step waits for another
                        process, "lock lost" if its session ends under its run, then "value: …" or
                        "error: …", then its statistics
      --load-start EPOCH-MS --bursts N --callers N --interval-ms N [--per-process yes]
                        the fleet load run: bursts of N callers of one key, every N ms
      --keys-start EPOCH-MS --keys N [--callers N]
                        N distinct keys at once (N callers each), once: "request <key> <ms> <role>"
      --pairs-start EPOCH-MS --pairs N --interval-ms N
                        pair i at start + i x interval: the work sleeps --work-ms, then prints
                        "end <i> <epoch-ns>"; each caller prints "heard <i> <epoch-ns> <led|joined>"
      --lone N          N calls one after another, each of a new key (work --work-ms), then N round
                        trips, N commits and N notifications on an open connection:
                        "lone|roundtrip|commit|notify <ms>"
      --throughput-seconds S --callers N
                        N callers asking new keys as fast as they can for S seconds: "throughput <values> <s>"
      --continuous N [--rate R] [--seconds S] [--start EPOCH-MS] [--count-notifications yes]
                        N callers asking new keys one after another (R values/s for the process at
                        most) until standard input closes, or for S seconds: "ready <pid>", then
                        "continuous values … max-ms …", the slowest calls, and with a counter of
                        its own on the channel, "notifications <n> …" (see Continuous.swift)
      --group service-throws|readiness|sigterm [--fail-after-ms N]
                        the app's service group: its PostgresClient, the coalescer on it and a service
                        that throws N ms (1000) after a first value went through the database, or
                        whose readiness check fails, or that waits for SIGTERM after "ready"; exits
                        1 with "error: …" when the group threw, 0 with "ended" (GroupEnd.swift)
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
let numbers = options.compactMapValues { Int($0) }
if let scenario = options["group"] {
    await GroupEnd.run(
        scenario: scenario, url: url, table: options["table"] ?? "coalescing_mailbox",
        failAfter: .milliseconds(numbers["fail-after-ms", default: 1000]))
}

enum Probe {
    /// Writes a line unbuffered: the tests read it while the probe may still run, or after it was killed.
    static func say(_ line: String) { FileHandle.standardOutput.write(Data("\(line)\n".utf8)) }

    /// A client of the probe's own for the gate, so that the gate never takes one of the coalescer's connections.
    static func gateClient(url: String, logger: Logger) throws -> PostgresClient {
        var configuration = try PostgresClient.Configuration(coalescingURL: url)
        configuration.options.maximumConnections = 1
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        Task.detached { await client.run() }
        return client
    }

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
    static func waitForGate(_ gate: Int64, client: PostgresClient, logger: Logger) async {
        do {
            try await client.withConnection { connection in
                _ = try await connection.query("SELECT pg_advisory_lock_shared(\(gate))", logger: logger).collect()
                _ = try await connection.query("SELECT pg_advisory_unlock_shared(\(gate))", logger: logger).collect()
            }
        } catch {
            Probe.say("gate: \(String(reflecting: error))")
        }
    }

    static var epochNanoseconds: Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    static func sleep(until epochMilliseconds: Double) async throws {
        let delay = epochMilliseconds / 1000 - Date().timeIntervalSince1970
        if delay > 0 { try await Task.sleep(for: .seconds(delay)) }
    }
}

var logger = Logger(label: "probe")
logger.logLevel = options["log-level"].flatMap(Logger.Level.init(rawValue:)) ?? .error
let pid = ProcessInfo.processInfo.processIdentifier
var configuration = PostgresCoalescerConfiguration()
configuration.table = options["table"] ?? configuration.table
configuration.whenDatabaseUnavailable = options["when-unavailable"] == "fail" ? .fail : .runLocally
let named = url + (url.contains("?") ? "&" : "?") + "application_name=probe-\(pid)"
let coalescer = try PostgresCoalescer<String>(
    url: named, maximumConnections: options["connections"].flatMap(Int.init) ?? 4, configuration: configuration,
    logger: logger,
    observer: { event in
        switch event {
        case .waitingForAnotherProcess: Probe.say("waiting")
        case .lockLost: Probe.say("lock lost \(Probe.epochNanoseconds)")
        default: break
        }
    })
// As an app runs it: in a service group, shut down gracefully at the end, so that the results this
// process produced are published before it exits.
let services = ServiceGroup(
    configuration: .init(services: [coalescer], gracefulShutdownSignals: [], cancellationSignals: [], logger: logger))
let running = Task { try await services.run() }
let work = Duration.milliseconds(numbers["work-ms", default: 0])

if let start = options["load-start"].flatMap(Double.init) {
    let load = FleetLoad(
        start: Date(timeIntervalSince1970: start / 1000), bursts: numbers["bursts", default: 0],
        callers: numbers["callers", default: 0],
        interval: .milliseconds(numbers["interval-ms", default: 0]), work: work, runsFile: runsFile)
    if options["per-process"] != nil {
        let local = InFlightTaskCoalescer<String, String>()
        try await load.run({ try await local.value(key: $0, operation: $1) }, ranHere: { local.statistics.workStarted })
    } else {
        try await load.run(
            { try await coalescer.value(key: $0, operation: $1) }, ranHere: { coalescer.statistics.runsHere })
    }
} else if let start = options["keys-start"].flatMap(Double.init) {
    try await Probe.sleep(until: start)
    await withTaskGroup(of: String.self) { group in
        for index in 0..<numbers["keys", default: 0] {
            for _ in 0..<max(1, numbers["callers", default: 0]) {
                group.addTask {
                    let key = "key-\(index)"
                    let started = ContinuousClock.now
                    var ran = false
                    let outcome: String
                    do {
                        let value = try await coalescer.value(key: key, timeout: .seconds(30)) {
                            Probe.appendLine("\(pid) \(key)", to: runsFile)
                            try await Task.sleep(for: work)
                            return "value of \(key)"
                        }
                        ran = coalescer.statistics.runsHere > 0
                        outcome = value == "value of \(key)" ? "ok" : "wrong-value"
                    } catch {
                        outcome = "error:\(String(describing: error).replacingOccurrences(of: " ", with: "_"))"
                    }
                    _ = ran
                    return
                        "request \(key) \(String(format: "%.3f", (ContinuousClock.now - started).seconds * 1000)) \(outcome)"
                }
            }
        }
        for await line in group { Probe.say(line) }
    }
} else if let start = options["pairs-start"].flatMap(Double.init) {
    for pair in 0..<numbers["pairs", default: 0] {
        try await Probe.sleep(until: start + Double(pair * numbers["interval-ms", default: 0]))
        let before = coalescer.statistics.runsHere
        _ = try await coalescer.value(key: "pair-\(pair)") {
            try await Task.sleep(for: work)
            Probe.say("end \(pair) \(Probe.epochNanoseconds)")
            return "value of pair \(pair)"
        }
        let heard = Probe.epochNanoseconds
        Probe.say("heard \(pair) \(heard) \(coalescer.statistics.runsHere > before ? "led" : "joined")")
    }
} else if let count = options["lone"].flatMap(Int.init) {
    // Once first, so that the session and a pooled connection are open, as in a running server.
    _ = try await coalescer.value(key: "lone-warm-\(pid)") { "warm" }
    for index in 0..<count {
        let started = ContinuousClock.now
        _ = try await coalescer.value(key: "lone-\(pid)-\(index)") {
            try await Task.sleep(for: work)
            return "value"
        }
        Probe.say("lone \(String(format: "%.4f", (ContinuousClock.now - started).seconds * 1000))")
    }
    var floorConfiguration = try PostgresClient.Configuration(coalescingURL: url)
    floorConfiguration.options.maximumConnections = 1
    let floor = PostgresClient(configuration: floorConfiguration, backgroundLogger: logger)
    let floorRun = Task { await floor.run() }
    try await floor.withConnection { connection in
        let table = "floor_\(pid)"
        _ = try await connection.query("CREATE TABLE \(unescaped: table) (n int)", logger: logger).collect()
        for _ in 0..<count {
            let started = ContinuousClock.now
            _ = try await connection.query("SELECT 1", logger: logger).collect()
            Probe.say("roundtrip \(String(format: "%.4f", (ContinuousClock.now - started).seconds * 1000))")
        }
        for index in 0..<count {
            let started = ContinuousClock.now
            _ = try await connection.query("INSERT INTO \(unescaped: table) VALUES (\(index))", logger: logger)
                .collect()
            Probe.say("commit \(String(format: "%.4f", (ContinuousClock.now - started).seconds * 1000))")
        }
        // A notification in its own transaction, as the session's announcement of a result is.
        for index in 0..<count {
            let started = ContinuousClock.now
            _ = try await connection.query(
                "SELECT pg_notify('floor_\(unescaped: String(pid))', \(String(index)))", logger: logger
            )
            .collect()
            Probe.say("notify \(String(format: "%.4f", (ContinuousClock.now - started).seconds * 1000))")
        }
        _ = try await connection.query("DROP TABLE \(unescaped: table)", logger: logger).collect()
    }
    floorRun.cancel()
} else if let seconds = options["throughput-seconds"].flatMap(Double.init) {
    let deadline = ContinuousClock.now + .seconds(seconds)
    let started = ContinuousClock.now
    let values = await withTaskGroup(of: Int.self) { group in
        for caller in 0..<max(1, numbers["callers", default: 0]) {
            group.addTask {
                var values = 0
                while ContinuousClock.now < deadline {
                    if (try? await coalescer.value(key: "unique-\(pid)-\(caller)-\(values)") { "value" }) != nil {
                        values += 1
                    }
                }
                return values
            }
        }
        var total = 0
        for await values in group { total += values }
        return total
    }
    Probe.say("throughput \(values) \(String(format: "%.3f", (ContinuousClock.now - started).seconds))")
} else if let callers = numbers["continuous"] {
    try await ContinuousLoad(
        callers: callers, rate: options["rate"].flatMap(Double.init), seconds: options["seconds"].flatMap(Double.init),
        start: options["start"].flatMap(Double.init).map { Date(timeIntervalSince1970: $0 / 1000) }, work: work,
        countsNotifications: options["count-notifications"] == "yes", url: url, table: configuration.table
    ).run(coalescer, logger: logger)
} else if let key = options["key"] {
    let gate = options["gate"].flatMap(Int64.init)
    let gateClient = try Probe.gateClient(url: url, logger: logger)
    let timeout = options["timeout-ms"].flatMap(Int.init).map { Duration.milliseconds($0) }
    Probe.say("ready \(pid)")
    do {
        let value = try await coalescer.value(key: key, timeout: timeout) {
            Probe.appendLine("\(pid) \(key)", to: runsFile)
            if let gate { await Probe.waitForGate(gate, client: gateClient, logger: logger) }
            try await Task.sleep(for: work)
            return "value of \(key)"
        }
        Probe.say("value: \(value)")
    } catch {
        Probe.say("error: \(error)")
    }
} else {
    FileHandle.standardError.write(Data("\(usage)\n".utf8))
    exit(2)
}
await services.triggerGracefulShutdown()
try await running.value
Probe.say("statistics: \(coalescer.statistics)")
// Explicitly: a probe returning from its top level was once seen stuck in the main thread's
// thread-specific-data destructors, after a database restart.
exit(0)

#else
print("coalescing-postgres-probe: built without the Postgres trait; build with --traits Postgres")
#endif
