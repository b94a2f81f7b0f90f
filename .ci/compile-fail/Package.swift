// swift-tools-version:6.0
// A caller that must NOT compile: `.ci/compile-fail/check` builds it and expects Swift 6 to reject
// the race in its completion handler. If this package ever builds, the library has stopped letting
// the compiler check its handlers.
import PackageDescription

let package = Package(
    name: "RacyCaller",
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    dependencies: [.package(name: "CoalescingOperations", path: "../..")],
    targets: [
        .executableTarget(
            name: "RacyCaller",
            dependencies: [.product(name: "CoalescingOperations", package: "CoalescingOperations")]
        )
    ]
)
