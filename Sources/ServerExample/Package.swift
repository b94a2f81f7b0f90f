// swift-tools-version: 6.2
import PackageDescription

// A Hummingbird 2 server that coalesces the loads of its route through CoalescingOperations,
// with the upstream service it loads from, its tests over loopback HTTP and a bounded load run.
// A package of its own, so that the library's package depends on nothing by default.
let package = Package(
    name: "ServerExample",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "profile-server", targets: ["profile-server"]),
        .executable(name: "profile-fleet", targets: ["profile-fleet"]),
    ],
    dependencies: [
        // The library with the three bridges it uses and the Postgres coalescer (for the fleet mode,
        // profile-fleet), each enabled by its trait; named, so that the products below do not depend
        // on the folder the checkout is in.
        .package(name: "CoalescingOperations", path: "../..", traits: ["Metrics", "Tracing", "Logging", "Postgres"]),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
    ],
    targets: [
        // Running a Hummingbird app on a loopback port, and state that tasks can wait on.
        .target(
            name: "ServerSupport",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The upstream the server loads from: a Hummingbird app that counts its loads, takes a
        // configurable time per load and can hold its answers until told.
        .target(
            name: "ProfileUpstream",
            dependencies: ["ServerSupport", .product(name: "Hummingbird", package: "hummingbird")]
        ),
        // The server: `GET /profiles/{id}`, coalesced, loaded from the upstream with AsyncHTTPClient.
        .target(
            name: "ProfileServer",
            dependencies: [
                "ServerSupport",
                .product(name: "CoalescingOperations", package: "CoalescingOperations"),
                .product(name: "CoalescingMetrics", package: "CoalescingOperations"),
                .product(name: "CoalescingTracing", package: "CoalescingOperations"),
                .product(name: "CoalescingLogging", package: "CoalescingOperations"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        // Runs the upstream and the server on loopback, to try with curl.
        .executableTarget(name: "profile-server", dependencies: ["ProfileServer", "ProfileUpstream", "ServerSupport"]),
        // The fleet mode (issue 29): the upstream alone, or one server instance of a fleet that
        // coalesces across processes through PostgreSQL; Benchmarks/Scripts/server-fleet-load.py
        // runs 4 of them on one upstream.
        .executableTarget(
            name: "profile-fleet",
            dependencies: [
                "ProfileServer", "ProfileUpstream", "ServerSupport",
                .product(name: "CoalescingPostgres", package: "CoalescingOperations"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        .testTarget(
            name: "ProfileServerTests",
            dependencies: [
                "ProfileServer", "ProfileUpstream", "ServerSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryLogging", package: "swift-log"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
