import XCTest

/// Asserts that `expression` throws `CancellationError`: the caller withdrew itself (its task was
/// cancelled), while the work went on for the others.
public func XCTAssertThrowsCancellation<T>(
    _ expression: @autoclosure () async throws -> T, file: StaticString = #filePath, line: UInt = #line
) async {
    do {
        _ = try await expression()
        XCTFail("expected CancellationError", file: file, line: line)
    } catch {
        XCTAssertTrue(error is CancellationError, "expected CancellationError, got \(error)", file: file, line: line)
    }
}
