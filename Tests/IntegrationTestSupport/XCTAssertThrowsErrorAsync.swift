import XCTest

/// Test equipment: fails unless `expression` throws, and returns what it threw.
@discardableResult
public func XCTAssertThrowsErrorAsync<T>(
    _ expression: @autoclosure () async throws -> T, file: StaticString = #filePath, line: UInt = #line
) async -> (any Error)? {
    do {
        _ = try await expression()
        XCTFail("expected an error", file: file, line: line)
        return nil
    } catch {
        return error
    }
}
