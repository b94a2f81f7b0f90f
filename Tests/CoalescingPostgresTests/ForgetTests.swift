#if Postgres
import CoalescingOperations
import CoalescingPostgres
import Foundation
import TestSupport
import XCTest

/// `forget(key:)` across processes (Guarantee 35): the callers a process registers after it need a
/// run that started after it; the callers registered before keep theirs.
final class ForgetTests: XCTestCase {
    // Guarantee 35.
    func testCallersRegisteredAfterAForgetNeverGetARunThatStartedBeforeIt() async throws {
        let configuration = Database.configuration("forget")
        let leaderProcess = try runningCoalescer(self, configuration: configuration)
        let events = FleetEventLog()
        let reader = try runningCoalescer(self, configuration: configuration, observer: events.record)
        // Twenty tries: the first design let the new caller take the old run in about half of them,
        // when the caller registered before the forget was still starting its step.
        for attempt in 0..<20 {
            let key = "profile:\(attempt)"
            let gate = WorkGate()
            let leader = Task {
                try await leaderProcess.value(key: key) {
                    try await gate.pass()
                    return "before the write"
                }
            }
            try await gate.reached.wait()
            let before = Task { try await reader.value(key: key) { "reader ran before" } }
            // Registered in this process, its step still starting: the moment the first design got wrong.
            await events.waitUntilStarted(key)
            reader.forget(key: key)  // say, after a write that the leader's run started before
            let after = Task { try await reader.value(key: key) { "after the write" } }
            await events.waitUntilWaiting(for: key, count: 2)
            gate.release.open()
            let values = [try await leader.value, try await before.value, try await after.value]
            XCTAssertEqual(values[2], "after the write", "try \(attempt)")
            // The caller registered before keeps its step: the leader's value, or the newer one if that
            // was published first; never a run of its own.
            XCTAssertNotEqual(values[1], "reader ran before", "try \(attempt)")
        }
    }

    // Guarantee 35: the same when the forget and the next call come from the observer.
    func testAForgetAndACallFromTheObserverAlsoNeedARunThatStartedAfterIt() async throws {
        let configuration = Database.configuration("observer")
        let leaderProcess = try runningCoalescer(self, configuration: configuration)
        let after = LockedBox<Task<String, any Error>?>(nil)
        let events = FleetEventLog()
        let readerBox = LockedBox<PostgresCoalescer<String>?>(nil)
        let reader = try runningCoalescer(self, configuration: configuration) { event in
            events.record(event)
            // The moment the first caller's work starts, the observer forgets and calls again.
            if case .local(.workStarted(let key, _)) = event, key == "k", after.value == nil,
                let reader = readerBox.value
            {
                reader.forget(key: key)
                after.value = Task { try await reader.value(key: key) { "after the write" } }
            }
        }
        readerBox.value = reader
        let gate = WorkGate()
        let leader = Task {
            try await leaderProcess.value(key: "k") {
                try await gate.pass()
                return "before the write"
            }
        }
        try await gate.reached.wait()
        let before = Task { try await reader.value(key: "k") { "reader ran before" } }
        await events.waitUntilWaiting(for: "k", count: 2)
        gate.release.open()
        let leaderValue = try await leader.value
        let beforeValue = try await before.value
        let afterValue = try await XCTUnwrap(after.value).value
        XCTAssertEqual([leaderValue, afterValue], ["before the write", "after the write"])
        XCTAssertNotEqual(beforeValue, "reader ran before")
    }
}
#endif
