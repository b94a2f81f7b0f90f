import Foundation
import HTTPStub
import XCTest

@testable import coalescing_demo

// What these check: that `coalescing-demo` tells the truth, run as a user runs it (the built
// binary, in a process of its own): a good run exits 0 and says what coalescing saved, counted by
// the embedded server; a run against a dead port exits non-zero with one line per failed caller
// naming the URL and the reason. The launch itself, run in-process against its embedded server
// answering 404 or JSON of the wrong shape, names the same for each failed caller. (The demo's
// figures are Guarantees 1, 21 and 22 at work; these tests check the demo, not the library.)

/// The output of one run of the demo.
private struct DemoRun {
    var status: Int32
    var standardOutput: String
    var standardError: String

    /// The lines of standard error that report a failed caller.
    var failureLines: [Substring] {
        standardError.split(separator: "\n").filter { $0.hasPrefix("coalescing-demo: failed: ") }
    }
}

final class DemoTests: XCTestCase {
    private typealias Fixtures = HTTPStub.Fixtures

    /// The question callers of the launch: the list's five, the splash screen and the next screen.
    /// The three user callers are served in-process under `--base-url`.
    private let questionCallers = 7

    /// The demo sits beside the test bundle in the build's products folder: the test target
    /// depends on it, so that `swift test` builds it.
    private func demoExecutable() throws -> URL {
        let products = Bundle.main.bundleURL.deletingLastPathComponent()
        for folder in [products, Bundle.main.bundleURL, products.deletingLastPathComponent()] {
            let candidate = folder.appendingPathComponent("coalescing-demo")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        throw XCTSkip("coalescing-demo is not built beside \(Bundle.main.bundleURL.path)")
    }

    /// Runs the demo to its end, or fails the test after a minute and kills it.
    private func runDemo(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> DemoRun {
        let process = Process()
        process.executableURL = try demoExecutable()
        process.arguments = arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        // Read both pipes to their end while the demo runs, so that neither fills and blocks it.
        let outputData = LockedData()
        let errorData = LockedData()
        let readers = DispatchGroup()
        for (pipe, data) in [(output, outputData), (errors, errorData)] {
            DispatchQueue.global().async(group: readers) { data.set(pipe.fileHandleForReading.readDataToEndOfFile()) }
        }
        if exited.wait(timeout: .now() + 60) == .timedOut {
            process.terminate()
            XCTFail(
                "coalescing-demo \(arguments.joined(separator: " ")) did not finish in a minute", file: file, line: line
            )
        }
        readers.wait()
        return DemoRun(
            status: process.terminationStatus, standardOutput: String(decoding: outputData.get(), as: UTF8.self),
            standardError: String(decoding: errorData.get(), as: UTF8.self))
    }

    func testTheLaunchSavesRequestsAndExitsZero() throws {
        // A latency well above the 160 ms over which the callers ask, so that they overlap even
        // on a loaded machine.
        let run = try runDemo(["--latency", "1000"])

        XCTAssertEqual(run.status, 0, run.standardError)
        XCTAssertTrue(run.standardOutput.contains("answers every request after 1000 ms"), run.standardOutput)
        XCTAssertTrue(run.standardOutput.contains("callers served      10"), run.standardOutput)
        XCTAssertTrue(run.standardOutput.contains("requests sent       3  (as the embedded server counted them)"))
        XCTAssertTrue(run.standardOutput.contains("requests saved      7"), run.standardOutput)
        XCTAssertEqual(run.failureLines, [])
    }

    func testEventsPrintsTheLibrarysEventStream() throws {
        let run = try runDemo(["--latency", "1000", "--events"])

        XCTAssertEqual(run.status, 0, run.standardError)
        let events = run.standardOutput.split(separator: "\n").filter { $0.contains(" event  ") }
        let started = events.filter { $0.contains("work started") }.count
        let joined = events.filter { $0.contains("caller joined") }.count
        // Nine callers go through managers (the tenth takes the prefetched page), each starting
        // work or joining it, and every work started ends.
        XCTAssertEqual(started + joined, 9, run.standardOutput)
        XCTAssertEqual(events.filter { $0.contains("work ended") }.count, started, run.standardOutput)
        XCTAssertEqual(started, 3, "with 1 s of latency every later caller overlaps: \(run.standardOutput)")
    }

    func testCompareShowsBothLaunchesSideBySide() throws {
        let run = try runDemo(["--compare", "--latency", "1000"])

        XCTAssertEqual(run.status, 0, run.standardError)
        let rows = run.standardOutput.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ") }
        XCTAssertTrue(rows.contains("coalescing on coalescing off"), run.standardOutput)
        XCTAssertTrue(rows.contains("requests sent 3 10"), run.standardOutput)
        XCTAssertTrue(rows.contains("requests saved 7 0"), run.standardOutput)
        XCTAssertTrue(rows.contains { $0.hasPrefix("wall time ") }, run.standardOutput)
    }

    func testADeadPortFailsWithOneLinePerCaller() throws {
        // Port 9 (discard) on loopback: nothing listens there on a test machine.
        let baseURL = "http://127.0.0.1:9"

        let run = try runDemo(["--base-url", baseURL, "--latency", "0"])

        XCTAssertEqual(run.status, 1)
        XCTAssertEqual(run.failureLines.count, questionCallers, run.standardError)
        for line in run.failureLines {
            XCTAssertTrue(line.contains(baseURL + "/2.3/questions?page="), String(line))
            XCTAssertTrue(line.hasSuffix("could not connect to the server (is it running?)"), String(line))
        }
        XCTAssertFalse(run.standardError.contains("Error Domain="), "a raw NSError dump: \(run.standardError)")
        XCTAssertTrue(run.standardOutput.contains("callers failed      \(questionCallers)"), run.standardOutput)
    }

    func testFastResponsesAreCalledOutWithTheRemedy() throws {
        let run = try runDemo(["--latency", "5"])

        XCTAssertEqual(run.status, 0, run.standardError)
        XCTAssertTrue(run.standardError.contains("warning: requests were answered in"), run.standardError)
        XCTAssertTrue(run.standardError.contains("a --latency above 40 ms"), run.standardError)
        XCTAssertFalse(run.standardError.contains("embedded server's --latency"), run.standardError)
    }

    func testHelpDocumentsWhatBaseURLAsksAndExpects() throws {
        let run = try runDemo(["--help"])

        XCTAssertEqual(run.status, 0)
        XCTAssertTrue(run.standardOutput.contains("GET URL/2.3/questions?page=N"), run.standardOutput)
        XCTAssertTrue(run.standardOutput.contains(#""has_more": true"#), run.standardOutput)
    }

    func testA404FailsWithOneLinePerQuestionCaller() async throws {
        let summary = try await launch(questions: .status(404))

        XCTAssertEqual(summary.failures.count, questionCallers, "\(summary.failures)")
        for line in summary.failures {
            XCTAssertTrue(line.contains("/2.3/questions?page="), line)
            XCTAssertTrue(line.hasSuffix("the server answered HTTP 404"), line)
        }
        XCTAssertEqual(summary.served, 3, "the user callers are served")
    }

    func testJSONOfTheWrongShapeNamesWhatWasWrong() async throws {
        let summary = try await launch(questions: .json(#"{"has_more":false}"#))

        XCTAssertEqual(summary.failures.count, questionCallers, "\(summary.failures)")
        for line in summary.failures {
            XCTAssertTrue(
                line.hasSuffix("the JSON is not in the expected shape: the top level has no key 'items'"), line)
        }
    }

    /// The launch, in-process and quiet, against the embedded server answering `questions` to
    /// every question request.
    private func launch(questions: StubResponse) async throws -> LaunchSummary {
        let options = try DemoOptions(arguments: ["--latency", "0"])
        return await LaunchScript(
            options: options, coalescing: true, quiet: true, routes: [Fixtures.questionsPath: questions]
        ).run()
    }
}

/// Bytes handed from a reading thread to the test.
private final class LockedData: @unchecked Sendable {
    // @unchecked: `data` is guarded by `lock`.
    private let lock = NSLock()
    private var data = Data()

    func set(_ newData: Data) { lock.withLock { data = newData } }
    func get() -> Data { lock.withLock { data } }
}
