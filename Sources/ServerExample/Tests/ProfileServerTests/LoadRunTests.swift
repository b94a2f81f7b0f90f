import ProfileUpstream
import ServerSupport
import XCTest

// A bounded load run over loopback HTTP: the same clients and requests, with and without
// coalescing, side by side. Coalescing runs fewer loads upstream (Guarantee 1) while every
// request is answered. Bounded in requests and in time; its figures are in the package's README.
final class LoadRunTests: XCTestCase {
    private let clients = 32
    private let requests = 2_000
    private let profiles = 8
    private let latency = Duration.milliseconds(20)
    private let deadline = Duration.seconds(15)

    private struct Figures {
        var answered: Int
        var elapsed: Duration
        var loads: Int
        var latencies: [Duration]

        var requestsPerSecond: Double { Double(answered) / elapsed.seconds }

        func percentile(_ percent: Int) -> Duration {
            let sorted = latencies.sorted()
            return sorted[min(sorted.count - 1, sorted.count * percent / 100)]
        }
    }

    func testABoundedLoadRunWithAndWithoutCoalescing() async throws {
        let coalesced = try await run(coalescing: true)
        let plain = try await run(coalescing: false)
        print(
            """
            load run: up to \(requests) requests in up to \(deadline) from \(clients) concurrent clients over \
            \(profiles) profiles, upstream latency \(latency), loopback
                                 coalescing   without
            requests answered  \(column(coalesced.answered))\(column(plain.answered))
            requests/s         \(column(Int(coalesced.requestsPerSecond)))\(column(Int(plain.requestsPerSecond)))
            loads run upstream \(column(coalesced.loads))\(column(plain.loads))
            p50 latency (ms)   \(column(coalesced.percentile(50).milliseconds))\(column(plain.percentile(50).milliseconds))
            p99 latency (ms)   \(column(coalesced.percentile(99).milliseconds))\(column(plain.percentile(99).milliseconds))
            """)
        XCTAssertEqual(plain.loads, plain.answered, "without coalescing, every request loads")
        XCTAssertLessThan(coalesced.loads * 2, coalesced.answered, "coalescing spares most loads")
    }

    private func column(_ value: some CustomStringConvertible) -> String {
        String(repeating: " ", count: max(0, 11 - "\(value)".count)) + "\(value)"
    }

    private func run(coalescing: Bool) async throws -> Figures {
        let harness = try await ServerHarness.start(upstream: ProfileUpstream(latency: latency), coalescing: coalescing)
        let clock = ContinuousClock()
        let start = clock.now
        let latencies = try await withThrowingTaskGroup(of: [Duration].self) { group in
            let sent = Watched(0)  // requests sent so far, which numbers the next one
            for _ in 0..<clients {
                group.addTask { [requests, profiles, deadline] in
                    var latencies: [Duration] = []
                    while clock.now - start < deadline,
                        let index = sent.update({ sent in sent < requests ? (sent, sent += 1).0 : nil })
                    {
                        let sent = clock.now
                        let answer = try await harness.get("/profiles/p\(index % profiles)")
                        XCTAssertEqual(answer.status, 200)
                        latencies.append(clock.now - sent)
                    }
                    return latencies
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        let figures = Figures(
            answered: latencies.count, elapsed: clock.now - start, loads: harness.upstream.counts.value.started,
            latencies: latencies)
        try await harness.stop()
        return figures
    }
}

extension Duration {
    fileprivate var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    fileprivate var milliseconds: Int {
        Int(seconds * 1000)
    }
}
