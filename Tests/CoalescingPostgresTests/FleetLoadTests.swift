#if Postgres
import CoalescingPostgres
import Foundation
import PostgresNIO
import TestSupport
import XCTest

/// Many keys at once across separate processes, with PostgreSQL's default `max_connections` (100):
/// the load under which the first design ran each key 2-4 times and ran out of connections.
final class FleetLoadTests: XCTestCase {
    // Guarantee 28.
    func testFourProcessesAsking256KeysTogetherRunEachKeyOnceAndHoldTheirPoolsOnly() async throws {
        let keys = 256
        let table = Database.configuration("burst").table
        let fleet = try ProbeFleet()
        let start = Int((Date().timeIntervalSince1970 + 2) * 1000)
        try fleet.start(
            4, arguments: ["--table", table, "--keys-start", String(start), "--keys", String(keys), "--work-ms", "100"])
        let peak = try await Database.withConnection { connection in
            var peak: [String: Int] = [:]
            while fleet.probes.contains(where: \.isRunning) {
                let rows = try await connection.query(
                    """
                    SELECT application_name, count(*)::bigint FROM pg_stat_activity
                    WHERE application_name LIKE 'probe-%' GROUP BY application_name
                    """, logger: Database.logger)
                for try await (name, count) in rows.decode((String, Int).self) {
                    peak[name] = max(peak[name] ?? 0, count)
                }
                try await Task.sleep(for: .milliseconds(10))
            }
            return peak
        }
        await fleet.waitForAll(seconds: 60)

        XCTAssertEqual(fleet.runs.count, keys, "one run per key across the fleet")
        let requests = fleet.lines.flatMap { $0.filter { $0.hasPrefix("request ") } }
        XCTAssertEqual(requests.count, 4 * keys, "every caller answered")
        XCTAssertEqual(requests.filter { !$0.hasSuffix(" ok") }, [], "every caller got its own key's value")
        XCTAssertEqual(peak.count, 4, "each process seen holding connections: \(peak)")
        XCTAssertLessThanOrEqual(peak.values.max() ?? .max, 4, "connections per process at peak: \(peak)")
        print(
            "256 keys x 4 processes: \(fleet.runs.count) runs, connections per process at peak \(peak.values.sorted())")
    }
}
#endif
