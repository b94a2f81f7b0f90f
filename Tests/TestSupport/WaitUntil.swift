import Foundation
import XCTest

/// Awaits until `condition` holds, yielding in between; fails the test after `seconds`.
///
/// For conditions only observable by asking (such as how many callers joined), not a sleep: it
/// returns as soon as the condition holds.
public func waitUntil(
    _ what: String, seconds: Double = 10, file: StaticString = #filePath, line: UInt = #line,
    _ condition: () async -> Bool
) async {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while await !condition() {
        guard ContinuousClock.now < deadline else {
            return XCTFail("timed out waiting until \(what)", file: file, line: line)
        }
        await Task.yield()
    }
}
