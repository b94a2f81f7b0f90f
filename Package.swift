// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "CoalescingOperations",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    products: [
        .library(name: "CoalescingOperations", targets: ["CoalescingOperations"]),
        .executable(name: "coalescing-demo", targets: ["coalescing-demo"]),
    ] + postgresProducts,
    traits: postgresTraits.union([.default(enabledTraits: [])]),
    dependencies: postgresDependencies,
    targets: postgresTargets + [
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

// MARK: - Postgres (issue 29): cross-process coalescing over PostgreSQL, behind the trait `Postgres`.
// With the trait off, no target below links a database package, so a consumer resolves nothing.

var postgresProducts: [Product] {
    [
        .library(name: "CoalescingPostgres", targets: ["CoalescingPostgres"]),
        .executable(name: "coalescing-postgres-probe", targets: ["coalescing-postgres-probe"]),
    ]
}

var postgresTraits: Set<Trait> {
    [
        .trait(name: "Postgres", description: "CoalescingPostgres: one run per key across processes, over PostgreSQL."),
        // Declared by the bridges' block as well (issue 28); keep one declaration when merging.
        .trait(name: "Metrics", description: "CoalescingMetrics, and the Postgres coalescer's swift-metrics counters."),
    ]
}

var postgresDependencies: [Package.Dependency] {
    [
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        // Also declared by the bridges' block (issue 28); keep one declaration when merging.
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
    ]
}

var postgresTargets: [Target] {
    [
        .target(
            name: "CoalescingPostgres",
            dependencies: [
                "CoalescingOperations",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Postgres"])),
                .product(name: "Metrics", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
            ]
        ),
        // The helper the multi-process tests start N times; with the trait off, a stub that says so.
        .executableTarget(name: "coalescing-postgres-probe", dependencies: ["CoalescingPostgres"]),
        .testTarget(
            name: "CoalescingPostgresTests",
            dependencies: [
                "CoalescingPostgres", "CoalescingOperations", "TestSupport", "coalescing-postgres-probe",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Postgres"])),
                .product(name: "MetricsTestKit", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
            ]
        ),
    ]
}
// MARK: - end of Postgres (issue 29)
