import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Time as the tests drive it, through the `clock:` every coalescer takes: Guarantees 15 (a stored
/// result until its timeout), 17 (a deadline for one caller) and 23 (stalled work is reported),
/// each passed by advancing a ``ManualClock``, with no sleep and in no wall time.
final class ClockTests: XCTestCase {
    // MARK: Guarantee 17: a 30-second timeout, as a user's test would drive it

    func testAThirtySecondTimeoutPassesWhenTheTestAdvancesTheClockInWellUnderASecond() async throws {
        let wall = ContinuousClock.now
        let clock = ManualClock()
        let profiles = InFlightTaskCoalescer<String, Int>(stallThreshold: nil, clock: clock)
        let never = AsyncGate()
        let caller = Task {
            try await profiles.value(key: "profile", timeout: .seconds(30)) {
                try await never.wait()
                return 1
            }
        }
        await clock.waitForSleepers(1)  // the caller's timeout is armed

        clock.advance(by: .seconds(29))
        XCTAssertEqual(profiles.statistics.callersTimedOut, 0, "29 seconds in, the caller still waits")
        clock.advance(by: .seconds(1))
        await XCTAssertThrowsCoalescingError(.timedOut, try await caller.value)

        XCTAssertEqual(profiles.statistics.callersTimedOut, 1)
        XCTAssertEqual(profiles.statistics.workCancelled, 1, "its last caller gone, the work was cancelled")
        XCTAssertLessThan(ContinuousClock.now - wall, .seconds(1))
    }

    func testAManagersCallerTimesOutWhenTheClockPassesItsDeadline() {
        let clock = ManualClock()
        let manager = OperationQueueManager(
            queue: Queues.serial("work", suspended: true), stallThreshold: nil, clock: clock)
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            identifier: "k", timeout: .seconds(30), makeOperation: { CoalescibleOperation<Int>(identifier: "k") },
            completionHandler: recorder.handler("caller"))
        let armed = Gate()
        Task {
            await clock.waitForSleepers(1)
            armed.open()
        }
        XCTAssertTrue(armed.wait())

        clock.advance(by: .seconds(30))
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertTimedOut("caller")
    }

    // MARK: Guarantee 23: a stall report

    func testStalledWorkIsReportedWhenTheClockPassesTheThreshold() async throws {
        let clock = ManualClock()
        let stalled = AsyncGate()
        let events = LockedBox<[String]>([])
        let coalescer = InFlightTaskCoalescer<String, Int>(
            observer: { event in
                events.mutate { $0.append(event.description) }
                if case .workStalled = event { stalled.open() }
            }, stallThreshold: .seconds(60), clock: clock)
        let release = AsyncGate()
        let caller = Task {
            try await coalescer.value(key: "feed") {
                try await release.wait()
                return 1
            }
        }
        await clock.waitForSleepers(1)  // the stall check is armed

        clock.advance(by: .seconds(60))
        try await stalled.wait()
        XCTAssertTrue(
            events.value.contains("workStalled(key: feed, work: 1, callers: 1, elapsed: 60.0 seconds)"),
            "\(events.value)")
        release.open()
        let value = try await caller.value
        XCTAssertEqual(value, 1)
    }

    func testTheDurationOfAnEndedWorkIsMeasuredOnTheClock() async throws {
        let clock = ManualClock()
        let ended = LockedBox<Duration?>(nil)
        let coalescer = InFlightTaskCoalescer<String, Int>(
            observer: { event in
                if case .workEnded(_, _, _, _, _, let duration) = event { ended.value = duration }
            }, stallThreshold: nil, clock: clock)
        let release = AsyncGate()
        let caller = Task {
            try await coalescer.value(key: "feed") {
                try await release.wait()
                return 1
            }
        }
        await waitUntil("the work started") { coalescer.statistics.workStarted == 1 }
        clock.advance(by: .seconds(42))
        release.open()
        _ = try await caller.value
        XCTAssertEqual(ended.value, .seconds(42))
    }

    // MARK: Guarantee 22: an abandoned work's duration, every way it is abandoned

    /// How work is abandoned by its one caller, 5 ms after it started.
    private enum Abandoning: CaseIterable { case withdrawn, timedOut, taskCancelled }

    func testTheDurationOfWorkAbandonedThroughTheManagerIsMeasuredOnTheClock() async throws {
        for way in Abandoning.allCases {
            let clock = ManualClock()
            let ended = LockedBox<Duration?>(nil)
            let manager = OperationQueueManager(
                queue: Queues.serial("work", suspended: true),
                observer: { event in
                    if case .workEnded(_, _, _, _, _, let duration) = event { ended.value = duration }
                }, stallThreshold: nil, clock: clock)
            switch way {
            case .withdrawn:
                // An operation with no handler of its own: its handle alone withdraws.
                let handle = manager.enqueue(operation: CoalescibleOperation<Int>(identifier: "k"))
                clock.advance(by: .milliseconds(5))
                handle.withdraw()
            case .timedOut:
                let handle = manager.enqueue(
                    identifier: "k", timeout: .milliseconds(5),
                    makeOperation: { CoalescibleOperation<Int>(identifier: "k") }, completionHandler: { _ in })
                await clock.waitForSleepers(1)  // the caller's timeout is armed
                clock.advance(by: .milliseconds(5))
                await waitUntil("the caller timed out") { manager.statistics.callersTimedOut == 1 }
                _ = handle
            case .taskCancelled:
                let caller = Task { try await manager.value(of: CoalescibleOperation<Int>(identifier: "k")) }
                await waitUntil("the caller waits") { manager.statistics.callersArrived == 1 }
                clock.advance(by: .milliseconds(5))
                caller.cancel()
                await XCTAssertThrowsCancellation(try await caller.value)
            }
            await waitUntil("the work's end was reported") { ended.value != nil }
            XCTAssertEqual(manager.statistics.workCancelled, 1, "abandoned: \(way)")
            XCTAssertEqual(ended.value, .milliseconds(5), "abandoned: \(way)")
        }
    }

    func testTheDurationOfWorkAbandonedThroughATaskCoalescerIsMeasuredOnTheClock() async throws {
        for way in Abandoning.allCases where way != .withdrawn {
            let clock = ManualClock()
            let ended = LockedBox<Duration?>(nil)
            let coalescer = InFlightTaskCoalescer<String, Int>(
                observer: { event in
                    if case .workEnded(_, _, _, _, _, let duration) = event { ended.value = duration }
                }, stallThreshold: nil, clock: clock)
            let never = AsyncGate()
            let caller = Task {
                try await coalescer.value(key: "k", timeout: way == .timedOut ? .milliseconds(5) : nil) {
                    await never.waitIgnoringCancellation()
                    return 1
                }
            }
            await waitUntil("the work started") { coalescer.statistics.workStarted == 1 }
            if way == .timedOut { await clock.waitForSleepers(1) }  // the caller's timeout is armed
            clock.advance(by: .milliseconds(5))
            if way == .taskCancelled { caller.cancel() }
            _ = try? await caller.value
            await waitUntil("the work's end was reported") { ended.value != nil }
            XCTAssertEqual(coalescer.statistics.workCancelled, 1, "abandoned: \(way)")
            XCTAssertEqual(ended.value, .milliseconds(5), "abandoned: \(way)")
            never.open()
        }
    }

    // MARK: Guarantee 15: a prefetched result until its timeout

    func testAStoredResultIsReleasedWhenItExpiresWithNoCallToTheCoalescer() async throws {
        let clock = ManualClock()
        let feed = PrefetchableTaskCoalescer<String, Int>(
            prefetchTimeout: .seconds(30), stallThreshold: nil, clock: clock)
        let runs = Counter()
        try await feed.prefetch(key: "feed") { runs.increment() }
        await clock.waitForSleepers(1)  // the stored result's expiry is armed

        clock.advance(by: .seconds(29))
        XCTAssertEqual(feed.storedCount, 1, "29 seconds in, the result waits")
        clock.advance(by: .seconds(1))
        await waitUntil("the expired result is released") { feed.storedCount == 0 }
        let value = try await feed.value(key: "feed") { runs.increment() }
        XCTAssertEqual(value, 2, "the next consumer starts new work")
    }
}
