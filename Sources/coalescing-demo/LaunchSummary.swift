import Foundation

/// The figures of one launch: the one place the summary's numbers come from.
///
/// The callers and the work are counted by the library: the managers' `statistics`, and their
/// events for how the work each caller was handed ended. The demo adds what only it knows: the
/// callers the prefetcher served from a stored result (until `PrefetchableTaskCoalescer` has
/// statistics of its own), the requests the server counted, the time, and which request failed why.
struct LaunchSummary {
    var coalescing: Bool
    var served = 0
    var failed = 0
    var cancelled = 0
    /// Work the managers ran: each a request, unless it failed before sending one.
    var workRun = 0
    /// Requests as the server counted them, or as the demo sent them when the server is not ours.
    var requestsSent = 0
    var requestsCountedByServer: Bool
    /// What the demo sent, by request, e.g. `1 × GET /users/42`.
    var requestsByKind: [(count: Int, request: String)] = []
    /// Runs of the work that callers were spared, because they joined work in flight or took a
    /// prefetched result.
    var requestsSaved = 0
    var wallTime: Duration
    /// One line per failed caller: who, which request, and why.
    var failures: [String] = []
    /// The median time a request took to answer, over requests that the server answered.
    var medianResponseTime: Duration?

    var callers: Int { served + failed + cancelled }

    init(
        coalescing: Bool, coalescers: Coalescers, tally: Tally, serverRequestCount: Int?, wallTime: Duration
    ) {
        self.coalescing = coalescing
        self.wallTime = wallTime
        let statistics = coalescers.statistics
        let fromPrefetch = tally.servedFromPrefetch
        served = coalescers.callersServed(.succeeded) + fromPrefetch
        failed = coalescers.callersServed(.failed)
        cancelled = coalescers.callersServed(.cancelled) + statistics.callersWithdrawn + statistics.callersTimedOut
        workRun = statistics.workStarted
        requestsSaved = statistics.callersJoined + fromPrefetch

        for (caller, request, outcome) in tally.callerOutcomes {
            if case .failed(let reason, _) = outcome {
                failures.append("\(caller): \(request): \(reason)")
            }
        }
        let sent = tally.requestsSent
        requestsSent = serverRequestCount ?? sent.count
        requestsCountedByServer = serverRequestCount != nil
        var byRequest: [String: Int] = [:]
        sent.forEach { byRequest[$0, default: 0] += 1 }
        requestsByKind = byRequest.sorted { $0.key < $1.key }.map { ($0.value, $0.key) }
        let durations = tally.responseDurations.sorted()
        medianResponseTime = durations.isEmpty ? nil : durations[durations.count / 2]
    }

    /// The summary of one launch, as printed after its timeline.
    var text: String {
        let counted = requestsCountedByServer ? "as the embedded server counted them" : "as the demo sent them"
        return """
            Summary, coalescing \(coalescing ? "on" : "off")
              callers served      \(served)
              callers failed      \(failed)
              callers cancelled   \(cancelled)
              work run            \(workRun)
              requests sent       \(requestsSent)  (\(counted))
            \(requestsByKind.map { "      \($0.count) × \($0.request)" }.joined(separator: "\n"))
              requests saved      \(requestsSaved)
              wall time           \(milliseconds(wallTime))
            """
    }

    /// The two launches side by side.
    static func comparison(_ on: LaunchSummary, _ off: LaunchSummary) -> String {
        func row(_ label: String, _ a: String, _ b: String) -> String {
            label.padding(toLength: 20, withPad: " ", startingAt: 0) + pad(a, 15) + pad(b, 16)
        }
        let rows = [
            row("", "coalescing on", "coalescing off"),
            row("callers served", "\(on.served)", "\(off.served)"),
            row("callers failed", "\(on.failed)", "\(off.failed)"),
            row("callers cancelled", "\(on.cancelled)", "\(off.cancelled)"),
            row("work run", "\(on.workRun)", "\(off.workRun)"),
            row("requests sent", "\(on.requestsSent)", "\(off.requestsSent)"),
            row("requests saved", "\(on.requestsSaved)", "\(off.requestsSaved)"),
            row("wall time", milliseconds(on.wallTime), milliseconds(off.wallTime)),
        ]
        return rows.joined(separator: "\n")
    }
}

/// `312 ms`.
func milliseconds(_ duration: Duration) -> String {
    "\(duration.components.seconds * 1_000 + duration.components.attoseconds / 1_000_000_000_000_000) ms"
}

private func pad(_ text: String, _ width: Int) -> String {
    String(repeating: " ", count: max(0, width - text.count)) + text
}
