import ProfileUpstream
import XCTest

// Clients that disconnect mid-burst, over real loopback connections: each one withdraws its
// request from the load at once (Guarantees 5 and 14), the others are still served, and the load
// upstream is cancelled only when the last has left, under the default policy (18).
final class DisconnectTests: XCTestCase {
    func testClientsThatDisconnectLeaveTheOthersServedByTheOneLoad() async throws {
        let harness = try await ServerHarness.start(upstream: ProfileUpstream(holding: true))
        let requests = try await harness.burst(6, of: "/profiles/ada")
        for request in requests[..<3] { request.cancel() }
        try await harness.seen.wait { $0.withdrawn == 3 }
        harness.upstream.release()

        for request in requests[3...] {
            let answer = try await request.value
            XCTAssertEqual(answer.status, 200)
        }
        for request in requests[..<3] {
            await XCTAssertThrowsErrorAsync(try await request.value)
        }
        XCTAssertEqual(harness.upstream.counts.value, counts(started: 1, answered: 1, cancelled: 0))
        try await harness.stop()
    }

    func testTheLoadIsCancelledUpstreamOnlyWhenTheLastClientHasLeft() async throws {
        let harness = try await ServerHarness.start(upstream: ProfileUpstream(holding: true))
        let requests = try await harness.burst(3, of: "/profiles/ada")
        requests[0].cancel()
        requests[1].cancel()
        try await harness.seen.wait { $0.withdrawn == 2 }
        XCTAssertEqual(harness.upstream.counts.value.cancelled, 0, "one client still waits")

        requests[2].cancel()
        try await harness.upstream.counts.wait { $0.cancelled == 1 }
        XCTAssertEqual(harness.upstream.counts.value, counts(started: 1, answered: 0, cancelled: 1))
        try await harness.seen.wait { $0.ended == 1 }
        XCTAssertEqual(harness.loader.statistics.workCancelled, 1)
        try await harness.stop()
    }

    private func counts(started: Int, answered: Int, cancelled: Int) -> UpstreamCounts {
        var counts = UpstreamCounts()
        counts.started = started
        counts.answered = answered
        counts.cancelled = cancelled
        return counts
    }
}

/// Test equipment: fails unless `expression` throws.
func XCTAssertThrowsErrorAsync<T>(
    _ expression: @autoclosure () async throws -> T, file: StaticString = #filePath, line: UInt = #line
) async {
    do {
        _ = try await expression()
        XCTFail("expected an error", file: file, line: line)
    } catch {}
}
