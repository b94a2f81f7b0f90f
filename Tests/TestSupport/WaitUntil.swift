import Foundation
import XCTest

/// Awaits until `condition` holds, polling every 100 µs; fails the test after `seconds`.
///
/// For conditions only observable by asking (such as how many callers joined), not a sleep: it
/// returns as soon as the condition holds. Between polls it suspends rather than yields: a task
/// that only yields stays runnable, and on a loaded machine (CI, 2 cores) Linux's dispatch let it
/// spin on the one thread it woke while the task it waited for was never scheduled.
public func waitUntil(
    _ what: String, seconds: Double = 10, file: StaticString = #filePath, line: UInt = #line,
    _ condition: () async -> Bool
) async {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while await !condition() {
        guard ContinuousClock.now < deadline else {
            return XCTFail("timed out waiting until \(what)", file: file, line: line)
        }
        try? await Task.sleep(for: .microseconds(100))
    }
}
