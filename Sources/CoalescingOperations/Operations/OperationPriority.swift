import Foundation

/// How soon an operation runs: the two Foundation knobs that decide it, taken together.
///
/// Coalesced work runs at the priority of its most urgent caller still waiting, and never below
/// what the app set on the operation itself. A caller states its priority through its operation's
/// `queuePriority` and `qualityOfService`, or with the `priority:` argument of the methods that
/// join with a handler alone.
public struct OperationPriority: Hashable, Sendable {
    // Plain integers, not Foundation's enums: those are resilient where Foundation is built for
    // library evolution (Linux today), and one resilient field makes every copy of the states that
    // hold a priority go through value witnesses: +250 ns per join (BENCHMARKS.md). The quality of
    // service is kept by urgency, so that both knobs order as plain numbers.
    @usableFromInline var queueLevel: Int8
    @usableFromInline var serviceUrgency: UInt8

    /// The operation's place among the operations waiting on its queue.
    public var queuePriority: Operation.QueuePriority {
        get { Operation.QueuePriority(rawValue: Int(queueLevel)) ?? .normal }
        set { queueLevel = Int8(clamping: newValue.rawValue) }
    }

    /// The class of the thread the operation runs on.
    public var qualityOfService: QualityOfService {
        get { Self.services[Int(serviceUrgency)] }
        set { serviceUrgency = newValue.urgency }
    }

    /// The classes by urgency; their raw values do not order them (`.default` is -1).
    private static let services: [QualityOfService] = [
        .background, .utility, .default, .userInitiated, .userInteractive,
    ]

    /// Creates a priority from its two knobs.
    ///
    /// - Parameters:
    ///   - queuePriority: The place among waiting operations. Defaults to `.normal`.
    ///   - qualityOfService: The thread's class. Defaults to `.default`.
    public init(queuePriority: Operation.QueuePriority = .normal, qualityOfService: QualityOfService = .default) {
        queueLevel = Int8(clamping: queuePriority.rawValue)
        serviceUrgency = qualityOfService.urgency
    }

    /// Reads an operation's current priority: its two getters, which a subclass may override.
    @usableFromInline init(of operation: Operation) {
        self.init(queuePriority: operation.queuePriority, qualityOfService: operation.qualityOfService)
    }
}

extension QualityOfService {
    /// Orders the classes by urgency; their raw values do not (`.default` is -1).
    @usableFromInline var urgency: UInt8 {
        switch self {
        case .background: 0
        case .utility: 1
        case .default: 2
        case .userInitiated: 3
        case .userInteractive: 4
        @unknown default: 2
        }
    }
}
