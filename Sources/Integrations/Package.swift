// swift-tools-version: 6.2
import PackageDescription

// Bridges from CoalescingOperations to the server ecosystem's observability APIs, kept in a
// package of their own so that the library, and the package that builds it, depend on nothing.
let package = Package(
    name: "CoalescingIntegrations",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    products: [
        .library(name: "CoalescingMetrics", targets: ["CoalescingMetrics"]),
        .library(name: "CoalescingTracing", targets: ["CoalescingTracing"]),
        .library(name: "CoalescingLogging", targets: ["CoalescingLogging"]),
    ],
    dependencies: [
        // The library. Named, so that the products below do not depend on the folder it is
        // checked out in (a path dependency is otherwise known by its folder's name).
        .package(name: "CoalescingOperations", path: "../.."),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
    ],
    targets: [
        // Counters, a meter and a timer for swift-metrics, fed by a coalescer's events.
        .target(
            name: "CoalescingMetrics",
            dependencies: [
                .product(name: "CoalescingOperations", package: "CoalescingOperations"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // A span per piece of work, handed the first caller's context explicitly, and linked
        // from every caller's span.
        .target(
            name: "CoalescingTracing",
            dependencies: [
                .product(name: "CoalescingOperations", package: "CoalescingOperations"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        // Stall reports, withdrawals and failures as structured swift-log records.
        .target(
            name: "CoalescingLogging",
            dependencies: [
                .product(name: "CoalescingOperations", package: "CoalescingOperations"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // Gates and bursts of callers that the tests below share.
        .target(
            name: "IntegrationTestSupport",
            dependencies: [.product(name: "CoalescingOperations", package: "CoalescingOperations")],
            path: "Tests/IntegrationTestSupport"
        ),
        .testTarget(
            name: "CoalescingMetricsTests",
            dependencies: [
                "CoalescingMetrics", "IntegrationTestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]
        ),
        .testTarget(
            name: "CoalescingTracingTests",
            dependencies: [
                "CoalescingTracing", "IntegrationTestSupport",
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ]
        ),
        .testTarget(
            name: "CoalescingLoggingTests",
            dependencies: [
                "CoalescingLogging", "IntegrationTestSupport",
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
