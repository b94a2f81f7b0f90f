import Benchmark

let benchmarks: @Sendable () -> Void = {
    Benchmark("smoke") { _ in }
}
