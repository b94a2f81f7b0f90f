import Foundation

/// Prints what happens, with the milliseconds since the demo started, one line at a time.
final class Timeline: Sendable {
    private let start = ContinuousClock.now
    private let lock = NSLock()
    /// Prints nothing: `--compare` shows only the two summaries.
    private let isQuiet: Bool

    init(quiet: Bool = false) {
        isQuiet = quiet
    }

    /// The time since the demo started, as the timeline shows it.
    var elapsed: Duration { ContinuousClock.now - start }

    /// Prints one event: when, who, what.
    func log(_ caller: String, _ event: String) {
        guard !isQuiet else { return }
        let elapsed = ContinuousClock.now - start
        let milliseconds = Int(
            elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
        let line =
            String(repeating: " ", count: max(0, 6 - String(milliseconds).count)) + "\(milliseconds) ms  "
            + caller.padding(toLength: 34, withPad: " ", startingAt: 0) + event
        lock.withLock { print(line) }
    }

    /// Prints a line as it is.
    func note(_ text: String) {
        guard !isQuiet else { return }
        lock.withLock { print(text) }
    }
}
