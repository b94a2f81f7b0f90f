import Foundation

// Plays an app launch against an embedded server (or a real one) and prints what coalescing saves.
// Everything is called back on queues of the demo's own: a command-line program does not service
// `OperationQueue.main` while its main thread waits.

let options: DemoOptions
do {
    options = try DemoOptions(arguments: Array(CommandLine.arguments.dropFirst()))
} catch let error as DemoOptions.UsageError {
    if !error.description.isEmpty {
        FileHandle.standardError.write(Data("coalescing-demo: \(error.description)\n\n".utf8))
    }
    print(DemoOptions.usage)
    exit(error.description.isEmpty ? 0 : 64)
}

func standardError(_ line: String) {
    FileHandle.standardError.write(Data("\(line)\n".utf8))
}

/// Warns when requests answered before the next caller asked: then nothing overlaps, and the
/// saving shown says more about the server's speed than about coalescing.
func warnIfTooFast(_ summary: LaunchSummary) {
    guard let median = summary.medianResponseTime, median < LaunchScript.callerSpacing else { return }
    let remedy =
        options.baseURL == nil
        ? "a --latency above \(milliseconds(LaunchScript.callerSpacing)) (250 ms by default) shows the effect"
        : "without --base-url, the embedded server's --latency shows the effect"
    standardError(
        "coalescing-demo: warning: requests were answered in \(milliseconds(median)) (median), faster than the "
            + "\(milliseconds(LaunchScript.callerSpacing)) between the question list's callers, so few callers "
            + "overlapped and coalescing had little to join; \(remedy)")
}

var failures: [String] = []
if options.compare {
    print(
        options.baseURL.map { "coalescing-demo --compare: the same app launch twice against \($0.absoluteString)" }
            ?? "coalescing-demo --compare: the same app launch twice against the embedded server, which answers "
            + "every request after \(milliseconds(options.latency))")
    let on = await LaunchScript(options: options, coalescing: true, quiet: true).run()
    let off = await LaunchScript(options: options, coalescing: false, quiet: true).run()
    print("\n" + LaunchSummary.comparison(on, off))
    warnIfTooFast(on)
    failures = on.failures.map { "coalescing on: \($0)" } + off.failures.map { "coalescing off: \($0)" }
} else {
    let summary = await LaunchScript(options: options, coalescing: options.coalescing).run()
    print("\n" + summary.text)
    print(summary.coalescing ? "Run with --compare to see the launch without coalescing." : "")
    warnIfTooFast(summary)
    failures = summary.failures
}

for failure in failures {
    standardError("coalescing-demo: failed: \(failure)")
}
exit(failures.isEmpty ? 0 : 1)
