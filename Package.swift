// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "CoalescingOperations",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    products: [
        .library(name: "CoalescingOperations", targets: ["CoalescingOperations"]),
        .executable(name: "coalescing-demo", targets: ["coalescing-demo"]),
    ],
    targets: [
        // The library: no dependencies.
        .target(name: "CoalescingOperations"),

        // Worked examples: a user fetch and a networking layer over URLSession.
        .target(name: "Examples", dependencies: ["CoalescingOperations"]),

        // Canned HTTP answers served in-process through a URLProtocol, counting requests: the
        // example tests' equipment and the demo's backend.
        .target(name: "HTTPStub"),

        .executableTarget(
            name: "coalescing-demo",
            dependencies: ["CoalescingOperations", "Examples", "HTTPStub"]
        ),

        // Gates, recorders and queues that every test target shares, and the one known
        // ThreadSanitizer false positive the test binaries are told to ignore.
        .target(
            name: "TestSupport", dependencies: ["CoalescingOperations", "ThreadSanitizerSuppressions"],
            path: "Tests/TestSupport"),
        .target(name: "ThreadSanitizerSuppressions", path: "Tests/ThreadSanitizerSuppressions"),

        .testTarget(name: "CoalescingOperationsTests", dependencies: ["CoalescingOperations", "TestSupport"]),
        .testTarget(
            name: "ExamplesTests", dependencies: ["Examples", "HTTPStub", "CoalescingOperations", "TestSupport"]
        ),
        // Runs the built demo as a user would; the dependency makes `swift test` build it.
        .testTarget(name: "DemoTests", dependencies: ["coalescing-demo", "HTTPStub"]),
    ],
    swiftLanguageModes: [.v6]
)
