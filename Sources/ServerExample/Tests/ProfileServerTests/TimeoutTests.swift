import ProfileUpstream
import XCTest

// A per-request timeout shorter than the load (Guarantee 17): every request of the burst answers
// 504 when its own timeout passes. Under the default policy the load, abandoned, is cancelled
// upstream (18); with `runToCompletion` it goes on, and a request arriving meanwhile joins it.
final class TimeoutTests: XCTestCase {
    func testATimeoutShorterThanTheLoadAnswers504AndCancelsTheAbandonedLoad() async throws {
        let harness = try await ServerHarness.start(
            upstream: ProfileUpstream(holding: true), timeout: .milliseconds(50))
        let requests = try await harness.burst(5, of: "/profiles/ada")
        for request in requests {
            let answer = try await request.value
            XCTAssertEqual(answer.status, 504)
        }
        try await harness.upstream.counts.wait { $0.cancelled == 1 }
        try await harness.seen.wait { $0.timedOut == 5 && $0.ended == 1 }
        XCTAssertEqual(harness.loader.statistics.callersTimedOut, 5)
        XCTAssertEqual(harness.loader.statistics.workCancelled, 1)
        try await harness.stop()
    }

    func testWithRunToCompletionTheLoadGoesOnAndServesWhoeverArrivesNext() async throws {
        let harness = try await ServerHarness.start(
            upstream: ProfileUpstream(holding: true), timeout: .milliseconds(500), whenAbandoned: .runToCompletion)
        let requests = try await harness.burst(5, of: "/profiles/ada")
        for request in requests {
            let answer = try await request.value
            XCTAssertEqual(answer.status, 504)
        }
        let latecomer = try await harness.burst(1, of: "/profiles/ada", arrivedBefore: 5)[0]
        harness.upstream.release()
        let answer = try await latecomer.value
        XCTAssertEqual(answer.status, 200)
        XCTAssertEqual(harness.upstream.counts.value.started, 1, "the latecomer joined the load that went on")
        XCTAssertEqual(harness.upstream.counts.value.cancelled, 0)
        try await harness.stop()
    }
}
