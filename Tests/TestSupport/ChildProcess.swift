import Foundation
import XCTest

/// Runs one scenario of a test binary in a child process of its own, so that a scenario that
/// crashes (a trap, a segmentation fault) fails the one test that ran it instead of ending the
/// whole run.
///
/// The child is this same test binary, asked to run a single test, the scenario's entry, with
/// ``scenarioVariable`` naming the scenario; that test runs nothing in the parent. To watch a
/// scenario by hand: `COALESCING_CHILD_SCENARIO=<scenario> .build/debug/<package>PackageTests.xctest
/// <entry>`.
public enum ChildProcess {
    /// The environment variable naming the scenario a child runs.
    public static let scenarioVariable = "COALESCING_CHILD_SCENARIO"

    /// The scenario this process was started to run, or nil in the parent.
    public static var scenario: String? {
        ProcessInfo.processInfo.environment[scenarioVariable]
    }

    /// How a child ended, and what it printed.
    public struct Outcome: CustomStringConvertible {
        /// The exit status, or the signal that ended the child.
        public let status: Int32
        /// Whether it exited or was killed by a signal.
        public let reason: Process.TerminationReason
        /// What it printed on standard output: XCTest's report.
        public let output: String
        /// What it printed on standard error.
        public let errorOutput: String

        /// Whether the child ran its test to a pass: exited, with status 0.
        public var passed: Bool { reason == .exit && status == 0 }

        /// How it ended, then both outputs, for a failure message.
        public var description: String {
            let ending = reason == .exit ? "exited with status \(status)" : "was killed by signal \(status)"
            return
                "the child process \(ending)\n--- its output ---\n\(output)\n--- its standard error ---\n\(errorOutput)"
        }
    }

    /// Runs `entry` (`"Module.Class/testMethod"`) of this test binary with `scenario`, and waits at
    /// most `seconds` for it to end; a child still running then is killed, and reported as such.
    public static func run(
        _ scenario: String, entry: String, environment: [String: String] = [:], seconds: Double = 120
    ) throws -> Outcome {
        #if !os(Linux)
        // On Linux the test binary is the executable itself; on Apple platforms it is a bundle
        // loaded by `xctest`, which would need another command line.
        throw XCTSkip("child processes are started the Linux way only")
        #else
        return try runLinux(scenario, entry: entry, environment: environment, seconds: seconds)
        #endif
    }

    #if os(Linux)
    private static func runLinux(
        _ scenario: String, entry: String, environment: [String: String], seconds: Double
    ) throws -> Outcome {
        let executable = URL(fileURLWithPath: CommandLine.arguments[0])
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "coalescing-child-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let outputURL = directory.appendingPathComponent("output")
        let errorURL = directory.appendingPathComponent("error")
        _ = FileManager.default.createFile(atPath: outputURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorURL.path, contents: nil)
        let output = try FileHandle(forWritingTo: outputURL)
        let errorOutput = try FileHandle(forWritingTo: errorURL)

        let process = Process()
        process.executableURL = executable
        process.arguments = [entry]
        // Swift's backtracer was seen stuck for minutes over a crashed child: the signal alone says
        // enough here, and running the same command line by hand gives the backtrace.
        let childEnvironment = environment.merging([scenarioVariable: scenario, "SWIFT_BACKTRACE": "enable=no"]) { $1 }
        process.environment = ProcessInfo.processInfo.environment.merging(childEnvironment) { $1 }
        process.standardOutput = output
        process.standardError = errorOutput
        let ended = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in ended.signal() }
        try process.run()
        if ended.wait(timeout: .now() + seconds) == .timedOut {
            process.terminate()
            ended.wait()
        }
        try output.close()
        try errorOutput.close()
        return Outcome(
            status: process.terminationStatus, reason: process.terminationReason,
            output: (try? String(contentsOf: outputURL, encoding: .utf8)) ?? "",
            errorOutput: (try? String(contentsOf: errorURL, encoding: .utf8)) ?? "")
    }
    #endif
}
