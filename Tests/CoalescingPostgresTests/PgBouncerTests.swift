#if Postgres
import CoalescingPostgres
import Foundation
import TestSupport
import XCTest

/// The fleet behind PgBouncer in session mode, the mode the article names: `.ci/postgres` starts
/// one in front of the cluster and sets `COALESCING_PGBOUNCER_URL`.
final class PgBouncerTests: XCTestCase {
    // Guarantee 28.
    func testBehindPgBouncerInSessionModeFourProcessesAsking64KeysRunEachOnce() async throws {
        guard let url = ProcessInfo.processInfo.environment["COALESCING_PGBOUNCER_URL"] else {
            throw XCTSkip("COALESCING_PGBOUNCER_URL is not set: `bash .ci/postgres start` starts PgBouncer too")
        }
        let keys = 64
        let table = Database.configuration("bouncer").table
        let fleet = try ProbeFleet()
        let start = Int((Date().timeIntervalSince1970 + 2) * 1000)
        try fleet.start(
            4,
            arguments: ["--table", table, "--keys-start", String(start), "--keys", String(keys), "--work-ms", "100"],
            url: url)
        await fleet.waitForAll(seconds: 60)
        XCTAssertEqual(fleet.runs.count, keys, "one run per key across the fleet")
        let requests = fleet.lines.flatMap { $0.filter { $0.hasPrefix("request ") } }
        XCTAssertEqual(requests.count, 4 * keys, "every caller answered")
        XCTAssertEqual(requests.filter { !$0.hasSuffix(" ok") }, [], "every caller got its own key's value")
    }
}
#endif
