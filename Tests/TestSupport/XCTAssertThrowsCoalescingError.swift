import CoalescingOperations
import XCTest

/// Asserts that `expression` throws `expected`, and nothing else: `CoalescingError.cancelled` for
/// work cancelled for everyone, `CoalescingError.timedOut` for a caller whose timeout passed.
public func XCTAssertThrowsCoalescingError<T>(
    _ expected: CoalescingError, _ expression: @autoclosure () async throws -> T, file: StaticString = #filePath,
    line: UInt = #line
) async {
    do {
        _ = try await expression()
        XCTFail("expected CoalescingError (\(expected))", file: file, line: line)
    } catch {
        XCTAssertEqual(
            error as? CoalescingError, expected, "expected CoalescingError (\(expected)), got \(error)", file: file,
            line: line)
    }
}
