// swift-tools-version: 6.2
import PackageDescription

// Bridges from CoalescingOperations to the server ecosystem's observability APIs, kept in a
// package of their own so that the library, and the package that builds it, depend on nothing.

/// One bridge: its target, on the library and one product of `package`, and its test target, on
/// the bridge and the package's own test backend.
func bridge(_ name: String, to product: String, testedWith backend: String, in package: String) -> [Target] {
    [
        .target(
            name: name,
            dependencies: [
                .product(name: "CoalescingOperations", package: "CoalescingOperations"),
                .product(name: product, package: package),
            ]
        ),
        .testTarget(
            name: name + "Tests",
            dependencies: [.byName(name: name), "IntegrationTestSupport", .product(name: backend, package: package)]
        ),
    ]
}

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
    targets:
        // Counters, a meter and a timer for swift-metrics, fed by a coalescer's events.
        bridge("CoalescingMetrics", to: "Metrics", testedWith: "MetricsTestKit", in: "swift-metrics")
        // A span per piece of work, handed the first caller's context explicitly, and linked from
        // every caller's span.
        + bridge("CoalescingTracing", to: "Tracing", testedWith: "InMemoryTracing", in: "swift-distributed-tracing")
        // Stall reports, withdrawals and failures as structured swift-log records.
        + bridge("CoalescingLogging", to: "Logging", testedWith: "InMemoryLogging", in: "swift-log")
        + [
            // Gates, bursts of callers and observers that the bridges' tests share.
            .target(
                name: "IntegrationTestSupport",
                dependencies: [.product(name: "CoalescingOperations", package: "CoalescingOperations")],
                path: "Tests/IntegrationTestSupport"
            )
        ],
    swiftLanguageModes: [.v6]
)
