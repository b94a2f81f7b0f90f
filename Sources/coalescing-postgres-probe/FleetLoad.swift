// The probe's load mode: one instance of a fleet under bursts of identical requests, for the
// fleet load run (`Benchmarks/Scripts/postgres-fleet-load.py` starts 4 of them).
#if Postgres
import CoalescingOperations
import CoalescingPostgres
import Foundation

/// Bursts at wall-clock instants shared by every process of the fleet: burst `b` starts at
/// `start + b × interval`, with `callers` concurrent requests for the key `burst-<b>`, whose work
/// appends a line to the runs file (the counted upstream) and takes `work` to answer.
struct FleetLoad {
    var start: Date
    var bursts: Int
    var callers: Int
    var interval: Duration
    var work: Duration
    var runsFile: String

    /// Runs the bursts through `value(key:operation:)`, and prints one line per request:
    /// `request <burst> <latency-ms> <led|joined>`.
    func run(
        _ value: @escaping @Sendable (String, @escaping @Sendable () async throws -> String) async throws -> String,
        ranHere: @escaping @Sendable () -> Int
    ) async throws {
        let pid = ProcessInfo.processInfo.processIdentifier
        for burst in 0..<bursts {
            let due = start.addingTimeInterval(Double(burst) * interval.seconds)
            let delay = due.timeIntervalSinceNow
            if delay > 0 { try await Task.sleep(for: .seconds(delay)) }
            let key = "burst-\(burst)"
            let before = ranHere()
            let latencies = try await withThrowingTaskGroup(of: Duration.self) { group in
                for _ in 0..<callers {
                    group.addTask { [work, runsFile] in
                        let started = ContinuousClock.now
                        _ = try await value(key) {
                            Probe.appendLine("\(pid) \(key)", to: runsFile)
                            try await Task.sleep(for: work)
                            return "value of \(key)"
                        }
                        return .now - started
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let role = ranHere() > before ? "led" : "joined"
            for latency in latencies {
                Probe.say("request \(burst) \(String(format: "%.3f", latency.seconds * 1000)) \(role)")
            }
        }
    }
}

extension Duration {
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
#endif
