import Benchmark

let benchmarks: @Sendable () -> Void = {
    Benchmark("smoke", configuration: .init(metrics: [.wallClock, .mallocCountTotal])) { _ in }
    Benchmark("smoke2", configuration: .init(metrics: [.wallClock, .mallocCountTotal])) { b in b.startMeasurement(); b.stopMeasurement() }
}
