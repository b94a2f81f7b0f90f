// swift-tools-version: 6.1
import PackageDescription

// Benchmarks for CoalescingOperations, kept in a package of their own so that the library has no
// dependency on the benchmark harness. Run them with `swift package benchmark` from this folder,
// or get every figure with its ratio to its baseline with `python3 Scripts/ratios.py`.
let package = Package(
    name: "CoalescingBenchmarks",
    // `Synchronization.Atomic`, used to count callbacks, needs macOS 15.
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: ".."),
        // Only the malloc interposer: allocation counts are half of what is measured here.
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // The designs users copy from the blog posts, measured as baselines.
        .target(name: "NaiveCoalescing"),

        // Work operations, queues and countdowns shared by the benchmark suites.
        .target(
            name: "BenchmarkSupport",
            dependencies: [
                .product(name: "CoalescingOperations", package: "main"),
                "NaiveCoalescing",
            ]
        ),

        // Workloads 1-4: OperationQueueManager against the naive manager and a raw OperationQueue.
        .executableTarget(
            name: "OperationCoalescing",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "CoalescingOperations", package: "main"),
                "NaiveCoalescing",
                "BenchmarkSupport",
            ],
            path: "Benchmarks/OperationCoalescing",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),

        // Workload 5: InFlightTaskCoalescer and PrefetchableTaskCoalescer against the seed-001 actor.
        .executableTarget(
            name: "TaskCoalescing",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "CoalescingOperations", package: "main"),
                "NaiveCoalescing",
                "BenchmarkSupport",
            ],
            path: "Benchmarks/TaskCoalescing",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
