import ProfileServer
import ProfileUpstream
import XCTest

// A burst of identical requests to the real server, over loopback HTTP, runs one load upstream
// and gives every client the same answer (Guarantees 1 and 12); once it has ended, the next burst
// runs a new load (7); different keys never share a load.
final class BurstTests: XCTestCase {
    func testABurstOfIdenticalRequestsRunsOneLoadAndGetsOneAnswer() async throws {
        let harness = try await ServerHarness.start(upstream: ProfileUpstream(holding: true))
        let requests = try await harness.burst(50, of: "/profiles/ada")
        harness.upstream.release()
        var answers: [Answer] = []
        for request in requests { answers.append(try await request.value) }

        let ada = Profile(id: "ada", name: "Profile ada", load: 1)
        XCTAssertEqual(answers.filter { $0.status == 200 && $0.profile == ada }.count, 50)
        XCTAssertEqual(harness.upstream.counts.value.started, 1)
        try await harness.seen.wait { $0.ended == 1 }  // a client can read its answer first
        XCTAssertEqual(harness.loader.statistics.callersJoined, 49)

        harness.upstream.hold()
        let next = try await harness.burst(10, of: "/profiles/ada", arrivedBefore: 50)
        harness.upstream.release()
        for request in next {
            let answer = try await request.value
            XCTAssertEqual(answer.profile?.load, 2, "a new burst, a new load")
        }
        try await harness.stop()
    }

    func testDifferentProfilesLoadSeparately() async throws {
        let harness = try await ServerHarness.start(upstream: ProfileUpstream(holding: true))
        let ada = try await harness.burst(5, of: "/profiles/ada")
        let grace = try await harness.burst(5, of: "/profiles/grace", arrivedBefore: 5)
        harness.upstream.release()
        for request in ada + grace {
            let answer = try await request.value
            XCTAssertEqual(answer.status, 200)
        }
        XCTAssertEqual(harness.upstream.counts.value.started, 2)
        try await harness.stop()
    }
}
