#if Postgres
import CoalescingPostgres
import Foundation
import PostgresNIO
import TestSupport
import XCTest

/// Slow is not down (issue 38, item 2): 4 processes x 16 callers asking keys no one asked before,
/// while one process, or its session's backend, stops for 1.5 s, and on a machine kept busy.
///
/// A stall is not an outage: the database answers throughout, so no step may run without it; a
/// caller waits at most the pause, a second and `connectTimeout`; and what one process's stall does
/// may not close another process's session. Each scenario runs ten tries, each with a fleet of its
/// own, and reports every try's figures before it judges them.
final class StallTests: XCTestCase {
    static let processes = 4
    static let callers = 16
    static let pause = Duration.milliseconds(1500)
    static let tries = 10
    /// The probes run the default configuration, so its `connectTimeout` is theirs.
    static let connectTimeout = PostgresCoalescerConfiguration().connectTimeout

    // Guarantees 34 and 30: a process stopped for 1.5 s is not an outage, for it or for the others.
    func testAProcessStoppedForASecondAndAHalfIsNoOutageForItOrTheOthers() async throws {
        let table = Database.configuration("stall_process").table
        var failed = 0
        for attempt in 0..<Self.tries {
            let stopped = attempt % Self.processes
            let failedTry = try await runTry(table: table, attempt: attempt, stopped: stopped) { fleet, _ in
                fleet.pids[stopped]
            }
            failed += failedTry ? 1 : 0
        }
        print("a process stopped for \(Self.pause): \(failed) of \(Self.tries) tries failed")
    }

    // Guarantees 34 and 30: a session's backend stopped for 1.5 s is not an outage, for its process
    // or for the others.
    func testASessionBackendStoppedForASecondAndAHalfIsNoOutageForItsProcessOrTheOthers() async throws {
        let table = Database.configuration("stall_backend").table
        var failed = 0
        for attempt in 0..<Self.tries {
            let stopped = attempt % Self.processes
            let failedTry = try await runTry(table: table, attempt: attempt, stopped: stopped) { _, sessions in
                sessions[stopped]
            }
            failed += failedTry ? 1 : 0
        }
        print("a session's backend stopped for \(Self.pause): \(failed) of \(Self.tries) tries failed")
    }

    // Guarantees 34 and 30: a machine whose cores are kept busy is not a database outage.
    func testABusyMachineIsNoOutage() async throws {
        let table = Database.configuration("stall_busy").table
        let burners = try Burners(count: 2 * ProcessInfo.processInfo.activeProcessorCount)
        defer { burners.stop() }
        var failed = 0
        for attempt in 0..<Self.tries {
            let failedTry = try await runTry(table: table, attempt: attempt, stopped: nil, hold: .seconds(3)) { _, _ in
                nil
            }
            failed += failedTry ? 1 : 0
        }
        print("a busy machine (\(burners.count) burners): \(failed) of \(Self.tries) tries failed")
    }

    /// One try: a fleet asking unique keys; after half a second of load, `target` (a process or a
    /// backend, by the fleet's probe pids and session backend pids) stops for ``pause``, then the
    /// load goes on for `hold`; the fleet then ends, and each probe's statistics, slowest call and
    /// log lines are judged.
    private func runTry(
        table: String, attempt: Int, stopped: Int?, hold: Duration = .milliseconds(1500),
        file: StaticString = #filePath, line: UInt = #line,
        target: (ContinuousFleet, [Int32]) -> Int32?
    ) async throws -> Bool {
        let fleet = try ContinuousFleet(id: attempt, count: Self.processes, callers: Self.callers, table: table)
        defer { fleet.end() }
        try await fleet.waitUntilReady(file: file, line: line)
        let before = try await fleet.sessions(file: file, line: line)

        try await Task.sleep(for: .milliseconds(500))
        let stalled = target(fleet, before)
        var notifyLock = "not looked at"
        if let stalled {
            XCTAssertEqual(kill(stalled, SIGSTOP), 0, "SIGSTOP \(stalled): errno \(errno)", file: file, line: line)
            let paused = ContinuousClock.now
            // Halfway, a look at who holds and who waits for the lock that serialises notifying
            // commits. It runs beside the stop and never holds it up: a backend stopped inside
            // PostgreSQL's lock manager keeps the look's own connection waiting until it resumes,
            // and a look awaited before the SIGCONT once stretched a 1.5 s stop to the look's
            // 10 s connect timeout, a real outage for every process.
            let halfway = paused + Self.pause / 2
            let look = Task { [before] in
                try? await Task.sleep(until: halfway)
                let answer = (try? await ContinuousFleet.notifyLock(sessions: before, stalled: stalled)) ?? "unknown"
                return (answer, ContinuousClock.now)
            }
            // Holding the stop is the scenario itself, not a wait for something to happen.
            try? await Task.sleep(until: paused + Self.pause)
            XCTAssertEqual(kill(stalled, SIGCONT), 0, "SIGCONT \(stalled): errno \(errno)", file: file, line: line)
            let resumed = ContinuousClock.now
            let (answer, answeredAt) = await look.value
            notifyLock = answeredAt <= resumed ? answer : "no answer until the stop ended, then \(answer)"
        }
        try await Task.sleep(for: hold)
        let after = try await fleet.currentSessions()
        fleet.closeInputs()
        let bound = Self.pause * (stalled == nil ? 0 : 1) + .seconds(1) + Self.connectTimeout
        // A call still waiting when the load ends may take the bound; the shutdown after it is prompt.
        await fleet.waitForAll(seconds: bound.milliseconds / 1000 + 5, file: file, line: line)

        var failed = false
        var summary: [String] = []
        for index in 0..<Self.processes {
            let probe = fleet.result(of: index)
            let isStopped = index == stopped
            let name = "try \(fleet.id), probe \(index)\(isStopped ? " (stopped)" : "")"
            let sessionKept = after[index] == [before[index]]
            summary.append(
                "\(index)\(isStopped ? "*" : ""): values \(probe.values), max \(String(format: "%.0f", probe.maxMilliseconds)) ms, "
                    + "unavailable \(probe.count("databaseUnavailable")) (ran without \(probe.count("ranWithoutDatabase"))), "
                    + "locksLost \(probe.count("locksLost")), publishFailures \(probe.count("publishFailures")), "
                    + "session \(before[index]) -> \(after[index].map(String.init).joined(separator: ","))"
                    + (probe.logLines.isEmpty ? "" : ", log: \(probe.logLines.joined(separator: " | "))"))
            var checks = [
                (probe.ended, "\(name) ended and printed its statistics:\n\(probe.output.suffix(2000))"),
                (
                    probe.count("ranWithoutDatabase") == 0 && probe.count("databaseUnavailable") == 0,
                    "\(name): no step runs without the database, which answered throughout"
                ),
                (probe.errors == 0, "\(name): no call failed"),
                (
                    probe.maxMilliseconds <= bound.milliseconds,
                    "\(name): its slowest call took \(probe.maxMilliseconds) ms, over \(bound)"
                ),
            ]
            if !isStopped {
                checks.append((probe.count("locksLost") == 0, "\(name) lost no lock: it was not stopped"))
                checks.append((sessionKept, "\(name) kept its session: it was not stopped"))
                checks.append((probe.lostSessionLines.isEmpty, "\(name) logged no lost session: it was not stopped"))
            }
            for (holds, message) in checks where !holds {
                failed = true
                XCTFail(message, file: file, line: line)
            }
        }
        print(
            "stall try \(fleet.id)\(stopped.map { " (probe \($0) stopped)" } ?? ""), load \(Burners.loadAverage): "
                + "\(failed ? "FAILED" : "held"); halfway through the stop, the notify lock: \(notifyLock)\n  "
                + summary.joined(separator: "\n  "))
        return failed
    }
}

/// `coalescing-postgres-probe --continuous` started N times, each reading its standard input from
/// the test: the load ends when the test closes it.
final class ContinuousFleet {
    /// The try's number, in the printed report.
    let id: Int
    private var probes: [Process] = []
    private var inputs: [Pipe] = []
    private var outputs: [URL] = []
    private let directory: URL

    init(id: Int, count: Int, callers: Int, table: String) throws {
        self.id = id
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coalescing-stall-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for index in 0..<count {
            let output = directory.appendingPathComponent("probe-\(index)")
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            let probe = Process()
            probe.executableURL = ProbeFleet.executable
            probe.arguments = [
                "--url", try Database.url(), "--runs-file", directory.appendingPathComponent("runs").path,
                "--table", table, "--log-level", "warning", "--continuous", String(callers),
            ]
            let input = Pipe()
            probe.standardInput = input
            probe.standardOutput = try FileHandle(forWritingTo: output)
            probe.standardError = probe.standardOutput
            probe.environment = ProcessInfo.processInfo.environment.merging(["SWIFT_BACKTRACE": "enable=no"]) { $1 }
            try probe.run()
            probes.append(probe)
            inputs.append(input)
            outputs.append(output)
        }
    }

    deinit {
        end()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Ends what still runs, a stopped probe included: SIGTERM alone stays pending on a stopped process.
    func end() {
        for probe in probes where probe.isRunning {
            kill(probe.processIdentifier, SIGCONT)
            kill(probe.processIdentifier, SIGKILL)
        }
    }

    var pids: [Int32] { probes.map(\.processIdentifier) }

    func output(of index: Int) -> String {
        (try? String(contentsOf: outputs[index], encoding: .utf8)) ?? ""
    }

    /// Waits until every probe has said "ready": its session is up and a value went through it.
    func waitUntilReady(file: StaticString, line: UInt) async throws {
        await waitUntil("every probe is ready", seconds: 30, file: file, line: line) {
            try? await Task.sleep(for: .milliseconds(20))
            return probes.indices.allSatisfy { output(of: $0).contains("ready ") }
        }
    }

    /// The backend pids each probe's session uses now: the only connections of the probe that take
    /// or hold advisory locks (its pooled connections read and sweep the table, never lock).
    func currentSessions() async throws -> [[Int32]] {
        let names = pids.map { "probe-\($0)" }
        let rows = try await Database.withConnection { connection in
            var rows: [(String, Int)] = []
            let query: PostgresQuery = """
                SELECT a.application_name, a.pid::bigint FROM pg_stat_activity a
                WHERE a.application_name = ANY(\(names))
                    AND (a.query LIKE '%advisory%'
                        OR EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'))
                """
            for try await row in try await connection.query(query, logger: Database.logger).decode((String, Int).self) {
                rows.append(row)
            }
            return rows
        }
        return names.map { name in rows.filter { $0.0 == name }.map { Int32($0.1) }.sorted() }
    }

    /// Waits until each probe has exactly one session backend, and returns them.
    func sessions(file: StaticString, line: UInt) async throws -> [Int32] {
        var sessions: [[Int32]] = []
        await waitUntil("each probe has one session backend", seconds: 10, file: file, line: line) {
            try? await Task.sleep(for: .milliseconds(20))
            sessions = (try? await currentSessions()) ?? []
            return sessions.count == probes.count && sessions.allSatisfy { $0.count == 1 }
        }
        return sessions.map { $0.first ?? 0 }
    }

    /// Who holds and who waits for the lock PostgreSQL takes to commit a transaction that
    /// notified (an object lock on `pg_database`, database 0): the session backends by their
    /// probe's index, and whether the holder is the stopped one.
    static func notifyLock(sessions: [Int32], stalled: Int32) async throws -> String {
        let rows = try await Database.withConnection { connection in
            var rows: [(Int, Bool)] = []
            let query: PostgresQuery = """
                SELECT pid::bigint, granted FROM pg_locks
                WHERE locktype = 'object' AND classid = 'pg_database'::regclass AND objid = 0 AND database = 0
                """
            for try await row in try await connection.query(query, logger: Database.logger).decode((Int, Bool).self) {
                rows.append(row)
            }
            return rows
        }
        func name(_ pid: Int) -> String {
            let backend = Int32(pid)
            let probe = sessions.firstIndex(of: backend).map { "probe \($0)'s session" } ?? "backend \(pid)"
            return backend == stalled ? "\(probe) (stopped)" : probe
        }
        let holders = rows.filter(\.1).map { name($0.0) }
        let waiters = rows.filter { !$0.1 }.map { name($0.0) }
        return "held by [\(holders.joined(separator: ", "))], waited for by [\(waiters.joined(separator: ", "))]"
    }

    /// Closes each probe's standard input: its callers stop asking, and it prints what it saw.
    func closeInputs() {
        for input in inputs { try? input.fileHandleForWriting.close() }
    }

    func waitForAll(seconds: Double, file: StaticString, line: UInt) async {
        await waitUntil("every probe ended", seconds: seconds, file: file, line: line) {
            try? await Task.sleep(for: .milliseconds(20))
            return !probes.contains { $0.isRunning }
        }
        end()
    }

    /// What probe `index` printed, read.
    func result(of index: Int) -> ProbeResult { ProbeResult(output: output(of: index)) }
}

/// A continuous probe's output: its `continuous` line, its statistics and its log.
struct ProbeResult {
    let output: String

    private var lines: [Substring] { output.split(separator: "\n") }

    /// The probe printed its load's figures and its statistics, so it drained and ended.
    var ended: Bool { load != nil && statistics != nil }

    private var load: [Substring]? { lines.last { $0.hasPrefix("continuous values ") }?.split(separator: " ") }
    private var statistics: Substring? { lines.last { $0.hasPrefix("statistics: ") } }

    private func field(_ name: String) -> Double? {
        guard let load, let index = load.firstIndex(of: Substring(name)), index + 1 < load.count else { return nil }
        return Double(load[index + 1])
    }

    var values: Int { Int(field("values") ?? 0) }
    var maxMilliseconds: Double { field("max-ms") ?? .infinity }
    var errors: Int { Int(field("errors") ?? 0) }

    /// A count of the statistics line by its name, as `PostgresCoalescingStatistics` prints it.
    func count(_ name: String) -> Int {
        guard let statistics, let range = statistics.range(of: "\(name) ") else { return -1 }
        return Int(statistics[range.upperBound...].prefix { $0.isNumber }) ?? -1
    }

    /// The coalescer's and PostgresNIO's log lines, warnings and worse, each message once with
    /// its count: a lost session logs once per lock it held.
    var logLines: [String] {
        var counts: [(String, Int)] = []
        for line in lines where line.contains(" warning ") || line.contains(" error ") || line.contains(" critical ") {
            let message = line.range(of: "] ").map { String(line[$0.upperBound...]) } ?? String(line)
            let error =
                line.range(of: "error=").map { start in
                    let rest = line[start.upperBound...]
                    return String(rest[..<(rest.range(of: " key=")?.lowerBound ?? rest.endIndex)].prefix(90))
                } ?? ""
            let entry = error.isEmpty ? message : "\(message) (\(error))"
            if let index = counts.firstIndex(where: { $0.0 == entry }) {
                counts[index].1 += 1
            } else {
                counts.append((entry, 1))
            }
        }
        return counts.map { "\($0.1) x \($0.0.prefix(160))" }
    }

    /// What says a session ended under the process: the log's line and the observer's event.
    var lostSessionLines: [Substring] {
        lines.filter { $0.contains("the session ended") || $0.hasPrefix("lock lost ") }
    }
}

/// Processes that keep the machine's cores busy for as long as a test runs.
///
/// Killed, not terminated: a child of the test binary inherits its blocked signals, SIGTERM
/// among them. Each also ends on its own after two minutes, should the test binary die first, and
/// writes nowhere, so that no pipe of `swift test` stays open behind it.
final class Burners {
    private var processes: [Process] = []
    var count: Int { processes.count }

    init(count: Int) throws {
        for _ in 0..<count {
            let burner = Process()
            burner.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            burner.arguments = ["python3", "-c", "import time\nend = time.time() + 120\nwhile time.time() < end: pass"]
            burner.standardInput = FileHandle.nullDevice
            burner.standardOutput = FileHandle.nullDevice
            burner.standardError = FileHandle.nullDevice
            try burner.run()
            processes.append(burner)
        }
    }

    deinit { stop() }

    func stop() {
        for burner in processes where burner.isRunning { kill(burner.processIdentifier, SIGKILL) }
    }

    /// The machine's load averages over 1, 5 and 15 minutes, as the report states them.
    static var loadAverage: String {
        let text = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? ""
        return text.split(separator: " ").prefix(3).joined(separator: " ")
    }
}

extension Duration {
    fileprivate var milliseconds: Double {
        Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15
    }
}
#endif
