// swift-tools-version: 6.1
import PackageDescription

/// A bridge from the library to one package of the server ecosystem, behind a package trait of its
/// own (SE-0450): its trait, its product and target, its test target, and the package it uses.
/// Enabling none of them, the default, a consumer resolves and builds nothing but the library; a
/// bridge's sources are wrapped in `#if <trait>`, so that with its trait off its target is empty.
struct Bridge {
    /// The trait that enables the bridge, such as `Metrics`.
    var trait: String
    /// The bridge's module and product, such as `CoalescingMetrics`.
    var module: String
    var summary: String
    /// The package the bridge uses, by URL and lowest version.
    var url: String
    var from: Version
    /// The products of that package the bridge uses, and those its tests use besides.
    var uses: [String]
    var testedWith: [String]

    /// The package's identity: the last part of its URL.
    var package: String { String(url.split(separator: "/").last!.split(separator: ".").first!) }

    func products(_ names: [String]) -> [Target.Dependency] {
        names.map { .product(name: $0, package: package, condition: .when(traits: [trait])) }
    }

    var targets: [Target] {
        [
            .target(name: module, dependencies: ["CoalescingOperations"] + products(uses)),
            .testTarget(
                name: module + "Tests",
                dependencies: [.byName(name: module), "IntegrationTestSupport", "TestSupport"] + products(testedWith)),
        ]
    }
}

let bridges = [
    Bridge(
        trait: "Metrics", module: "CoalescingMetrics",
        summary: "CoalescingMetrics: counters, a meter and a timer for swift-metrics, fed by a coalescer's events.",
        url: "https://github.com/apple/swift-metrics.git", from: "2.13.0",
        uses: ["CoreMetrics"], testedWith: ["MetricsTestKit"]),
    Bridge(
        trait: "Tracing", module: "CoalescingTracing",
        summary: "CoalescingTracing: a span per caller and per work for swift-distributed-tracing, the work's a "
            + "child of its first caller's.",
        url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3",
        uses: ["Tracing"], testedWith: ["InMemoryTracing"]),
    Bridge(
        trait: "Logging", module: "CoalescingLogging",
        summary: "CoalescingLogging: stalls, withdrawals and failures, with their errors, as swift-log records.",
        url: "https://github.com/apple/swift-log.git", from: "1.16.2",
        uses: ["Logging"], testedWith: ["InMemoryLogging"]),
]

let package = Package(
    name: "CoalescingOperations",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    products: [
        .library(name: "CoalescingOperations", targets: ["CoalescingOperations"]),
        .library(name: "CoalescingHTTP", targets: ["CoalescingHTTP"]),
        .executable(name: "coalescing-demo", targets: ["coalescing-demo"]),
    ] + bridges.map { .library(name: $0.module, targets: [$0.module]) } + postgresProducts + asyncHTTPClientProducts,
    traits: Set(
        bridges.map { .trait(name: $0.trait, description: $0.summary) } + [
            postgresTrait, asyncHTTPClientTrait, .default(enabledTraits: []),
        ]),
    dependencies: bridges.map { .package(url: $0.url, from: $0.from) } + postgresDependencies
        + asyncHTTPClientDependencies,
    targets: postgresTargets + asyncHTTPClientTargets + [
        // The library: no dependencies.
        .target(name: "CoalescingOperations"),

        // Coalesced HTTP requests over URLSession (issue 40): the library and Foundation, nothing else.
        .target(name: "CoalescingHTTP", dependencies: ["CoalescingOperations"]),

        // Worked examples: a user fetch and a networking layer over URLSession.
        .target(name: "Examples", dependencies: ["CoalescingOperations"]),

        // Canned HTTP answers served in-process through a URLProtocol, counting requests: the
        // example tests' equipment and the demo's backend.
        .target(name: "HTTPStub"),

        .executableTarget(
            name: "coalescing-demo",
            dependencies: ["CoalescingOperations", "CoalescingHTTP", "Examples", "HTTPStub"]
        ),

        // Gates, recorders and queues that every test target shares, and the one known
        // ThreadSanitizer false positive the test binaries are told to ignore.
        .target(
            name: "TestSupport", dependencies: ["CoalescingOperations", "ThreadSanitizerSuppressions"],
            path: "Tests/TestSupport"),
        .target(name: "ThreadSanitizerSuppressions", path: "Tests/ThreadSanitizerSuppressions"),
        // Gates, bursts of callers and observers that the bridges' tests share.
        .target(
            name: "IntegrationTestSupport", dependencies: ["CoalescingOperations"], path: "Tests/IntegrationTestSupport"
        ),

        .testTarget(name: "CoalescingOperationsTests", dependencies: ["CoalescingOperations", "TestSupport"]),
        .testTarget(
            name: "CoalescingHTTPTests", dependencies: ["CoalescingHTTP", "HTTPStub", "TestSupport", "HTTPContract"]),
        // The behaviour both HTTP clients promise, written once; each client's tests run it.
        .target(
            name: "HTTPContract", dependencies: ["CoalescingHTTP", "CoalescingOperations", "TestSupport"],
            path: "Tests/HTTPContract"),
        .testTarget(
            name: "ExamplesTests", dependencies: ["Examples", "HTTPStub", "CoalescingOperations", "TestSupport"]
        ),
        // Runs the built demo as a user would; the dependency makes `swift test` build it.
        .testTarget(name: "DemoTests", dependencies: ["coalescing-demo", "HTTPStub"]),
    ] + bridges.flatMap(\.targets),
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

var postgresTrait: Trait {
    .trait(name: "Postgres", description: "CoalescingPostgres: one run per key across processes, over PostgreSQL.")
}

/// swift-log and swift-metrics come with the bridges' block; with `Metrics` on as well, the
/// Postgres coalescer counts into swift-metrics.
var postgresDependencies: [Package.Dependency] {
    [
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
    ]
}

var postgresTargets: [Target] {
    [
        .target(
            name: "CoalescingPostgres",
            dependencies: [
                "CoalescingOperations",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio", condition: .when(traits: ["Postgres"])),
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: .when(traits: ["Postgres"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Postgres"])),
                .product(name: "Metrics", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
            ]
        ),
        // The helper the multi-process tests start N times; with the trait off, a stub that says so.
        .executableTarget(
            name: "coalescing-postgres-probe",
            dependencies: [
                "CoalescingPostgres",
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: .when(traits: ["Postgres"])),
            ]),
        .testTarget(
            name: "CoalescingPostgresTests",
            dependencies: [
                "CoalescingPostgres", "CoalescingOperations", "TestSupport", "coalescing-postgres-probe",
                // The bridges the article's one observer feeds; empty modules with their traits off.
                "CoalescingMetrics", "CoalescingLogging",
                .product(
                    name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: .when(traits: ["Postgres"])),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["Postgres"])),
                .product(name: "Logging", package: "swift-log", condition: .when(traits: ["Postgres"])),
                .product(name: "MetricsTestKit", package: "swift-metrics", condition: .when(traits: ["Metrics"])),
            ]
        ),
    ]
}

// MARK: - AsyncHTTPClient (issue 40): coalesced requests for servers, behind the trait `AsyncHTTPClient`.
// With the trait off, the targets below link nothing but the library and CoalescingHTTP.

var asyncHTTPClientProducts: [Product] {
    [.library(name: "CoalescingAsyncHTTPClient", targets: ["CoalescingAsyncHTTPClient"])]
}

var asyncHTTPClientTrait: Trait {
    .trait(
        name: "AsyncHTTPClient",
        description: "CoalescingAsyncHTTPClient: coalesced requests for AsyncHTTPClient's HTTPClient.")
}

/// swift-nio and swift-service-lifecycle come with the Postgres block, and the bridges' packages
/// with theirs.
var asyncHTTPClientDependencies: [Package.Dependency] {
    [
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
    ]
}

var asyncHTTPClientTargets: [Target] {
    func ahc(_ name: String, _ package: String, trait: String = "AsyncHTTPClient") -> Target.Dependency {
        .product(name: name, package: package, condition: .when(traits: [trait]))
    }
    return [
        .target(
            name: "CoalescingAsyncHTTPClient",
            dependencies: [
                "CoalescingHTTP", "CoalescingOperations",
                ahc("AsyncHTTPClient", "async-http-client"),
                ahc("NIOCore", "swift-nio"), ahc("NIOHTTP1", "swift-nio"),
                // AsyncHTTPClient's own dependency: the request's span is a child of the caller's.
                ahc("Tracing", "swift-distributed-tracing"),
            ]
        ),
        // A real Hummingbird server on loopback; the bridges' modules are empty with their traits off.
        .testTarget(
            name: "CoalescingAsyncHTTPClientTests",
            dependencies: [
                "CoalescingAsyncHTTPClient", "CoalescingHTTP", "CoalescingOperations", "TestSupport", "HTTPContract",
                "CoalescingMetrics", "CoalescingTracing", "CoalescingLogging",
                ahc("AsyncHTTPClient", "async-http-client"), ahc("Hummingbird", "hummingbird"),
                ahc("NIOCore", "swift-nio"), ahc("NIOHTTP1", "swift-nio"),
                ahc("ServiceLifecycle", "swift-service-lifecycle"), ahc("Logging", "swift-log"),
                ahc("MetricsTestKit", "swift-metrics", trait: "Metrics"),
                ahc("InMemoryTracing", "swift-distributed-tracing", trait: "Tracing"),
                ahc("InMemoryLogging", "swift-log", trait: "Logging"),
            ]
        ),
    ]
}
