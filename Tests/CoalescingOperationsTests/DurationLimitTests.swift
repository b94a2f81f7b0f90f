import CoalescingOperations
import Foundation
import TestSupport
import XCTest

/// Guarantees 17 (a deadline for one caller) and 23 (stalled work is reported) (see the Guarantees
/// article) at the ends of the range: a duration longer than anything schedulable means never, a
/// zero or negative one means at once, and an unusable `COALESCING_STALL_THRESHOLD_SECONDS` is
/// ignored with one line on standard error.
///
/// Each of these overflowed into a trap once (issue 18): those scenarios run in a child process of
/// their own, so that a trap fails its test instead of the whole run.
final class DurationLimitTests: XCTestCase {
    private let callbacks = Queues.concurrent("callbacks")
    private static let entry =
        "CoalescingOperationsTests.DurationLimitTests/testTheScenarioTheParentNamesRunsHereInAChildProcess"
    private static let variable = "COALESCING_STALL_THRESHOLD_SECONDS"

    /// The test a child process runs: the scenario the parent named, or nothing in the parent.
    func testTheScenarioTheParentNamesRunsHereInAChildProcess() async throws {
        guard let name = ChildProcess.scenario else { return }
        switch try XCTUnwrap(Scenario(rawValue: name), "no scenario named \(name)") {
        case .operationTimeouts: operationCallersWithTheLongestTimeoutsGetTheResult()
        case .taskTimeouts: await taskCallersWithTheLongestTimeoutsGetTheResult()
        case .stallThreshold: workUnderTheLongestStallThresholdIsNeverReported()
        case .environment: managersReadingTheEnvironmentServeTheirCallers()
        }
    }

    enum Scenario: String {
        case operationTimeouts, taskTimeouts, stallThreshold, environment
    }

    // MARK: Guarantee 17: a timeout longer than anything schedulable never passes

    func testOperationCallersWithATimeoutOfAboutThreeHundredYearsOrMoreWaitForTheResult() throws {
        try assertPasses(.operationTimeouts)
    }

    func testTaskCallersWithATimeoutOfAboutThreeHundredYearsOrMoreWaitForTheResult() throws {
        try assertPasses(.taskTimeouts)
    }

    // MARK: Guarantee 17: a zero or negative timeout passes at once

    func testACallerWithANegativeTimeoutTimesOutAtOnceAndTheWorkGoesOnForTheOthers() {
        let manager = OperationQueueManager()
        let release = Gate()
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            operation: TestOperation<Int>(
                callBackQueue: callbacks, work: heldWork(release: release) { 1 },
                completionHandler: recorder.handler("patient")))
        manager.enqueue(
            operation: TestOperation<Int>(
                callBackQueue: callbacks, work: { $0.finish(result: .success(2)) },
                completionHandler: recorder.handler("hasty")),
            timeout: .seconds(-1))

        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertTimedOut("hasty")
        release.open()
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("patient", 1)
    }

    func testATaskCallerWithAZeroTimeoutTimesOutAtOnce() async {
        let coalescer = InFlightTaskCoalescer<String, Int>()
        let release = AsyncGate()
        do {
            _ = try await coalescer.value(key: "k", timeout: .zero) {
                await release.waitIgnoringCancellation()
                return 1
            }
            XCTFail("a zero timeout passes at once")
        } catch {
            XCTAssertEqual(error as? CoalescingError, .timedOut)
        }
        release.open()
    }

    // MARK: Guarantee 23: the stall threshold at the ends of its range

    func testWorkUnderAStallThresholdOfAboutThreeHundredYearsOrMoreIsServedAndNeverReported() throws {
        try assertPasses(.stallThreshold)
    }

    func testAZeroOrNegativeStallThresholdReportsWorkWithCallersWaitingAtOnce() {
        for threshold: Duration in [.zero, .seconds(-5)] {
            let stalled = expectation(description: "reported as stalled under \(threshold)")
            let manager = OperationQueueManager(
                observer: { if case .workStalled = $0 { stalled.fulfill() } }, stallThreshold: threshold)
            let release = Gate()
            let recorder = ResultRecorder<Int>()
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, work: heldWork(release: release) { 1 },
                    completionHandler: recorder.handler("waiting")))
            wait(for: [stalled], timeout: 10)
            release.open()
            XCTAssertTrue(recorder.waitForCalls(1))
        }
    }

    func testUnusableEnvironmentValuesAreIgnoredWithOneLineOnStandardError() throws {
        for value in ["inf", "-inf", "nan", "-1", "ten", ""] {
            let outcome = try ChildProcess.run(
                Scenario.environment.rawValue, entry: Self.entry, environment: [Self.variable: value])
            XCTAssertTrue(outcome.passed, "\(Self.variable)=\(value): \(outcome)")
            let lines = outcome.errorOutput.split(separator: "\n").filter { $0.contains(Self.variable) }
            XCTAssertEqual(lines.count, 1, "\(Self.variable)=\(value): one line for two managers: \(outcome)")
        }
    }

    func testAnEnvironmentThresholdBeyondAnythingSchedulableMeansNeverAndIsNotAnError() throws {
        for value in ["1e20", "9223372036854775807"] {
            let outcome = try ChildProcess.run(
                Scenario.environment.rawValue, entry: Self.entry, environment: [Self.variable: value])
            XCTAssertTrue(outcome.passed, "\(Self.variable)=\(value): \(outcome)")
            XCTAssertFalse(outcome.errorOutput.contains(Self.variable), "\(Self.variable)=\(value): \(outcome)")
        }
    }

    // MARK: The scenarios

    /// Runs `scenario` in a child process and fails unless it passed there.
    private func assertPasses(_ scenario: Scenario, file: StaticString = #filePath, line: UInt = #line) throws {
        let outcome = try ChildProcess.run(scenario.rawValue, entry: Self.entry)
        XCTAssertTrue(outcome.passed, "\(scenario): \(outcome)", file: file, line: line)
    }

    private func operationCallersWithTheLongestTimeoutsGetTheResult() {
        let manager = OperationQueueManager(queue: Queues.concurrent("work", suspended: true))
        let recorder = ResultRecorder<Int>()
        for timeout: Duration in [.seconds(Int64.max), .seconds(9_300_000_000), .nanoseconds(Int64.max)] {
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                    completionHandler: recorder.handler("operation \(timeout)")),
                timeout: timeout)
            manager.enqueue(
                identifier: "work", callBackQueue: callbacks, timeout: timeout,
                makeOperation: { TestOperation<Int>(work: { $0.finish(result: .success(2)) }) },
                completionHandler: recorder.handler("handler \(timeout)"))
        }
        manager.queue.isSuspended = false
        XCTAssertTrue(recorder.waitForCalls(6))
        XCTAssertEqual(recorder.values, [1, 1, 1, 1, 1, 1], "every caller joined the first work and got its result")
    }

    private func taskCallersWithTheLongestTimeoutsGetTheResult() async {
        let longest = Duration.seconds(Int64.max)
        do {
            let inFlight = InFlightTaskCoalescer<String, Int>()
            let value = try await inFlight.value(key: "k", timeout: longest) { 1 }
            XCTAssertEqual(value, 1)
            let prefetchable = PrefetchableTaskCoalescer<String, Int>(prefetchTimeout: longest)
            try await prefetchable.prefetch(key: "k", timeout: longest) { 2 }
            let prefetched = try await prefetchable.value(key: "k", timeout: longest) { 3 }
            XCTAssertEqual(prefetched, 2, "the prefetched result, kept for as long as can be")
        } catch {
            XCTFail("\(error)")
        }
    }

    private func workUnderTheLongestStallThresholdIsNeverReported() {
        let stalls = Counter()
        let manager = OperationQueueManager(
            observer: { if case .workStalled = $0 { _ = stalls.increment() } }, stallThreshold: .seconds(Int64.max))
        let recorder = ResultRecorder<Int>()
        manager.enqueue(
            operation: TestOperation<Int>(
                callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                completionHandler: recorder.handler("a")))
        XCTAssertTrue(recorder.waitForCalls(1))
        recorder.assertValue("a", 1)
        XCTAssertEqual(stalls.current, 0)
    }

    /// Two managers read the environment; each serves its caller.
    private func managersReadingTheEnvironmentServeTheirCallers() {
        let recorder = ResultRecorder<Int>()
        for manager in [OperationQueueManager(), OperationQueueManager()] {
            manager.enqueue(
                operation: TestOperation<Int>(
                    callBackQueue: callbacks, work: { $0.finish(result: .success(1)) },
                    completionHandler: recorder.handler("a")))
        }
        XCTAssertTrue(recorder.waitForCalls(2))
        XCTAssertEqual(recorder.values, [1, 1])
    }
}
