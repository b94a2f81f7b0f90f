#if Logging
import CoalescingLogging
import CoalescingOperations
import InMemoryLogging
import IntegrationTestSupport
import Logging
import XCTest

// The swift-log bridge against swift-log's own in-memory handler: the events of Guarantee 22
// become structured records for a caller withdrawn (14), one timed out (17), work that fails for
// all its callers (2, as the task coalescers deliver it) and a stall report (23).
final class CoalescingLoggingTests: XCTestCase {
    private struct Unavailable: Error, CustomStringConvertible {
        var description: String { "upstream answered 500" }
    }

    private let handler = InMemoryLogHandler()

    private func logging(level: Logger.Level = .info) -> CoalescingLogging {
        var logger = Logger(label: "server") { [handler] _ in handler }
        logger.logLevel = level
        return CoalescingLogging(coalescer: "profiles", logger: logger)
    }

    private var records: [(level: Logger.Level, message: String, metadata: [String: String])] {
        handler.entries.map { entry in
            (entry.level, entry.message.description, entry.metadata.mapValues(\.description))
        }
    }

    func testWithdrawalsAndAFailureAreStructuredRecords() async throws {
        let seen = Observation()
        let coalescer = InFlightTaskCoalescer<String, Int>(observer: seen.observer(logging().record))
        let tasks = try await seen.burstWithTwoCallersLeaving(of: 3, through: coalescer) { throw Unavailable() }
        let error = await XCTAssertThrowsErrorAsync(try await tasks[0].value)
        XCTAssertTrue(error is Unavailable)
        try await seen.ended.wait()

        let withdrawn = records.filter { $0.message == "caller withdrew" }
        XCTAssertEqual(
            Set(withdrawn.map { "\($0.level) \($0.metadata["reason"] ?? "")" }), ["info withdrawn", "notice timed_out"])
        XCTAssertTrue(withdrawn.allSatisfy { $0.metadata["key"] == "ada" && $0.metadata["coalescer"] == "profiles" })
        let ended = try XCTUnwrap(records.first { $0.message == "coalesced work ended" })
        XCTAssertEqual(ended.level, .warning)
        XCTAssertEqual(ended.metadata["outcome"], "failed")
        XCTAssertEqual(ended.metadata["callers_served"], "1")
        XCTAssertEqual(ended.metadata["error"], "upstream answered 500", "the failure's record says why")
        XCTAssertEqual(records.count, 3, "started and joined are trace records, below the logger's level")
        XCTAssertEqual(Set(records.map { $0.metadata["work"] }), ["1"], "every record names the one work")
    }

    func testAStallIsAWarningWithItsWorkCallersAndElapsedTime() {
        logging().record(
            CoalescingEvent<String>.workStalled(key: "ada", work: 7, callers: 2, elapsed: .milliseconds(30_500)))
        XCTAssertEqual(records.count, 1)
        XCTAssertEqual(records.first?.level, .warning)
        XCTAssertEqual(records.first?.message, "coalesced work stalled")
        XCTAssertEqual(
            records.first?.metadata,
            ["coalescer": "profiles", "key": "ada", "work": "7", "callers": "2", "elapsed_ms": "30500"])
    }

    func testEveryStepIsATraceRecordWhenTheLevelAllows() async throws {
        let seen = Observation()
        let coalescer = InFlightTaskCoalescer<String, Int>(observer: seen.observer(logging(level: .trace).record))
        _ = try await coalescer.value(key: "ada") { 42 }
        try await seen.ended.wait()
        XCTAssertEqual(records.map(\.message), ["coalesced work started", "coalesced work ended"])
        XCTAssertEqual(records.last?.level, .debug)
        XCTAssertNil(records.last?.metadata["error"], "work that succeeded names no error")
    }
}
#endif
