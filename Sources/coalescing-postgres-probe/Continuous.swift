// The probe's continuous mode: callers asking new keys without a pause, for the stall tests
// (`StallTests`) and the capacity benchmark (`Benchmarks/Scripts/postgres-capacity.py`).
#if Postgres
import CoalescingOperations
import CoalescingPostgres
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// `callers` callers of one process, each asking a key no one asked before as soon as its last
/// call returned, so that every call is a run of its own and a database step: the load under
/// which a stall shows whether the process goes on without the database.
///
/// The load ends when standard input closes (the tests decide when, after a stall they caused),
/// or after `seconds`. Each call's latency is timed from its start to its answer, a stop of the
/// process included, since that is what a caller waits.
struct ContinuousLoad {
    var callers: Int
    /// Values per second for the whole process, spread over its callers; nil for as fast as they go.
    var rate: Double?
    var seconds: Double?
    /// The wall-clock instant the load starts, shared by the processes of a benchmark.
    var start: Date?
    var work: Duration
    /// Counts the notifications on the table's channel on a connection of the probe's own.
    var countsNotifications: Bool
    var url: String
    var table: String

    /// What one caller saw: its calls' latencies in milliseconds, and the first errors.
    private struct Calls: Sendable {
        var latencies: [Double] = []
        var slowest: [(milliseconds: Double, startedAt: Double)] = []
        var errors = 0
        var firstErrors: [String] = []
    }

    func run(_ coalescer: PostgresCoalescer<String>, logger: Logger) async throws {
        let pid = ProcessInfo.processInfo.processIdentifier
        // "Ready" means the session is up and a value went through it. A value asked before the
        // session is up runs here once `connectTimeout` has passed, which a slow start on a busy
        // machine reaches: the stall tests would count it as running without the database. The
        // coalescer says when its session is ready but sends no event for it, so this looks.
        while !coalescer.isSessionReady { try await Task.sleep(for: .milliseconds(10)) }
        _ = try await coalescer.value(key: "continuous-warm-\(pid)") { "warm" }
        let counter =
            countsNotifications ? try await NotificationCounter.start(url: url, table: table, logger: logger) : nil
        Probe.say("ready \(pid)")
        if let start { try await Probe.sleep(until: start.timeIntervalSince1970 * 1000) }

        let ended = NIOLockedValueBox(false)
        if let seconds {
            Task {
                try? await Task.sleep(for: .seconds(seconds))
                ended.withLockedValue { $0 = true }
            }
        } else {
            // A thread, not a task: reading standard input blocks.
            Thread.detachNewThread {
                _ = FileHandle.standardInput.readDataToEndOfFile()
                ended.withLockedValue { $0 = true }
            }
        }
        counter?.open()
        let slots = NIOLockedValueBox(0)
        let began = ContinuousClock.now
        let all = await withTaskGroup(of: Calls.self) { group in
            for caller in 0..<max(1, callers) {
                group.addTask { [rate, work] in
                    var calls = Calls()
                    var index = 0
                    while !ended.withLockedValue({ $0 }) {
                        if let rate {
                            // A shared schedule, so that the process's rate holds whichever callers are free.
                            let slot = slots.withLockedValue { slot in
                                defer { slot += 1 }
                                return slot
                            }
                            let due = began + .seconds(Double(slot) / rate)
                            if due > .now { try? await Task.sleep(until: due, clock: .continuous) }
                            if ended.withLockedValue({ $0 }) { break }
                        }
                        let key = "continuous-\(pid)-\(caller)-\(index)"
                        index += 1
                        let startedAt = Date().timeIntervalSince1970 * 1000
                        let started = ContinuousClock.now
                        do {
                            let value = try await coalescer.value(key: key) {
                                try await Task.sleep(for: work)
                                return key
                            }
                            if value != key { throw ProbeError.wrongValue(key: key, value: value) }
                        } catch {
                            calls.errors += 1
                            if calls.firstErrors.count < 3 { calls.firstErrors.append("\(error)") }
                        }
                        let milliseconds = (ContinuousClock.now - started).seconds * 1000
                        calls.latencies.append(milliseconds)
                        calls.slowest.append((milliseconds, startedAt))
                        if calls.slowest.count > 8 {
                            calls.slowest.sort { $0.milliseconds > $1.milliseconds }
                            calls.slowest.removeLast()
                        }
                    }
                    return calls
                }
            }
            return await group.reduce(into: [Calls]()) { $0.append($1) }
        }
        let elapsed = (ContinuousClock.now - began).seconds
        let heard = await counter?.close()

        let latencies = all.flatMap(\.latencies).sorted()
        func percentile(_ fraction: Double) -> Double {
            latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * fraction))]
        }
        Probe.say(
            "continuous values \(latencies.count) seconds \(String(format: "%.3f", elapsed)) "
                + "p50-ms \(String(format: "%.3f", percentile(0.5))) p99-ms \(String(format: "%.3f", percentile(0.99))) "
                + "max-ms \(String(format: "%.3f", latencies.last ?? 0)) errors \(all.map(\.errors).reduce(0, +))")
        for call in all.flatMap(\.slowest).sorted(by: { $0.milliseconds > $1.milliseconds }).prefix(3) {
            Probe.say(
                "slowest \(String(format: "%.3f", call.milliseconds)) started \(String(format: "%.0f", call.startedAt))"
            )
        }
        for error in all.flatMap(\.firstErrors).prefix(3) { Probe.say("call error: \(error)") }
        if let heard {
            Probe.say(
                "notifications \(heard.total) results \(heard.results) releases \(heard.releases) other \(heard.other)")
        }
    }
}

enum ProbeError: Error {
    case wrongValue(key: String, value: String)
    case listenerFailed
}

/// A listener of the probe's own on the table's channel: every notification reaches every
/// listening connection, so what it hears is what each process's session hears.
final class NotificationCounter: Sendable {
    struct Heard: Sendable {
        var total = 0
        var results = 0
        var releases = 0
        var other = 0
    }

    private let heard = NIOLockedValueBox(Heard())
    private let counting = NIOLockedValueBox(false)
    private let tasks = NIOLockedValueBox<[Task<Void, Never>]>([])

    private init() {}

    /// Returns once the listener heard a notification of its own: PostgresNIO does not say when
    /// `LISTEN` took effect, and a count that missed the start would be low.
    static func start(url: String, table: String, logger: Logger) async throws -> NotificationCounter {
        var configuration = try PostgresClient.Configuration(coalescingURL: url)
        configuration.options.maximumConnections = 1
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let counter = NotificationCounter()
        let hello = "counter-hello \(UUID().uuidString)"
        let (ready, readied) = AsyncStream.makeStream(of: Void.self)
        let clientRun = Task { await client.run() }
        let listening = Task {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: table) { notifications in
                        let greeting = Task {
                            while !Task.isCancelled {
                                _ = try? await connection.query("SELECT pg_notify(\(table), \(hello))", logger: logger)
                                    .collect()
                                try? await Task.sleep(for: .milliseconds(50))
                            }
                        }
                        defer { greeting.cancel() }
                        for try await notification in notifications {
                            if notification.payload == hello {
                                greeting.cancel()
                                readied.yield()
                            } else {
                                counter.count(notification.payload)
                            }
                        }
                    }
                }
            } catch {
                Probe.say("counter: \(error)")
            }
            readied.finish()
        }
        counter.tasks.withLockedValue { $0 = [clientRun, listening] }
        for await _ in ready { return counter }
        throw ProbeError.listenerFailed
    }

    /// Counts from now on.
    func open() { counting.withLockedValue { $0 = true } }

    private func count(_ payload: String) {
        guard counting.withLockedValue({ $0 }) else { return }
        heard.withLockedValue { heard in
            heard.total += 1
            if payload.contains(" released ") {
                heard.releases += 1
            } else if payload.hasPrefix("hello ") || payload.hasPrefix("counter-hello ") {
                heard.other += 1
            } else {
                heard.results += 1
            }
        }
    }

    /// Stops counting and returns what was heard while the load ran.
    func close() async -> Heard {
        counting.withLockedValue { $0 = false }
        let tasks = self.tasks.withLockedValue { $0 }
        for task in tasks.reversed() {
            task.cancel()
            await task.value
        }
        return heard.withLockedValue { $0 }
    }
}
#endif
