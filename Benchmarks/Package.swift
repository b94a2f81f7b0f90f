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
        // The library. Named, so that the products below do not depend on the folder it is
        // checked out in (a path dependency is otherwise known by its folder's name).
        .package(name: "CoalescingOperations", path: ".."),
        // Only the malloc interposer: allocation counts are half of what is measured here.
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // Work operations, queues and countdowns shared by the benchmark suites.
        .target(
            name: "BenchmarkSupport",
            dependencies: [
                .product(name: "CoalescingOperations", package: "CoalescingOperations")
            ]
        ),

        // Workloads 1-4: OperationQueueManager against the naive manager and a raw OperationQueue.
        // The naive baseline (Baseline/) is compiled into the benchmark itself, as apps paste it
        // into their own module: its generic code is then specialized for its callers.
        .executableTarget(
            name: "OperationCoalescing",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "CoalescingOperations", package: "CoalescingOperations"),
                "BenchmarkSupport",
            ],
            path: "Benchmarks/OperationCoalescing",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),

        // Workload 5: InFlightTaskCoalescer and PrefetchableTaskCoalescer against the seed-001 actor,
        // which is compiled into the benchmark (Baseline/) for the same reason.
        .executableTarget(
            name: "TaskCoalescing",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "CoalescingOperations", package: "CoalescingOperations"),
                "BenchmarkSupport",
            ],
            path: "Benchmarks/TaskCoalescing",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),

        // Workload 9: CoalescingURLSession against a plain URLSession, both sending to an
        // in-process URLProtocol stub that answers at once (issue 40).
        .executableTarget(
            name: "HTTPCoalescing",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "CoalescingHTTP", package: "CoalescingOperations"),
                .product(name: "CoalescingOperations", package: "CoalescingOperations"),
            ],
            path: "Benchmarks/HTTPCoalescing",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
