import Foundation

/// How soon an operation runs: the two Foundation knobs that decide it, taken together.
///
/// Coalesced work runs at the priority of its most urgent caller still waiting, and never below
/// what the app set on the operation itself. A caller states its priority through its operation's
/// `queuePriority` and `qualityOfService`, or with the `priority:` argument of the methods that
/// join with a handler alone.
public struct OperationPriority: Hashable, Sendable {
    // Raw values, not Foundation's enums: those are resilient where Foundation is built for
    // library evolution (Linux today), and one resilient field makes every copy of the states that
    // hold a priority go through value witnesses: +250 ns per join (BENCHMARKS.md). One byte
    // each (every raw value fits), so that a caller's slot stays 32 bytes.
    @usableFromInline var queueLevel: Int8
    @usableFromInline var serviceLevel: Int8

    /// The operation's place among the operations waiting on its queue.
    public var queuePriority: Operation.QueuePriority {
        get { Operation.QueuePriority(rawValue: Int(queueLevel)) ?? .normal }
        set { queueLevel = Int8(clamping: newValue.rawValue) }
    }

    /// The class of the thread the operation runs on.
    public var qualityOfService: QualityOfService {
        get { QualityOfService(rawValue: Int(serviceLevel)) ?? .default }
        set { serviceLevel = Int8(clamping: newValue.rawValue) }
    }

    /// Creates a priority from its two knobs.
    ///
    /// - Parameters:
    ///   - queuePriority: The place among waiting operations. Defaults to `.normal`.
    ///   - qualityOfService: The thread's class. Defaults to `.default`.
    public init(queuePriority: Operation.QueuePriority = .normal, qualityOfService: QualityOfService = .default) {
        queueLevel = Int8(clamping: queuePriority.rawValue)
        serviceLevel = Int8(clamping: qualityOfService.rawValue)
    }

    /// Reads an operation's current priority: its two getters, which a subclass may override.
    @usableFromInline init(of operation: Operation) {
        self.init(queuePriority: operation.queuePriority, qualityOfService: operation.qualityOfService)
    }

    /// Each knob at the more urgent of the two values.
    func raised(to other: OperationPriority) -> OperationPriority {
        var raised = self
        raised.queueLevel = max(queueLevel, other.queueLevel)
        if other.qualityOfService.urgency > qualityOfService.urgency {
            raised.serviceLevel = other.serviceLevel
        }
        return raised
    }
}

extension QualityOfService {
    /// Orders the classes by urgency; their raw values do not (`.default` is -1).
    var urgency: Int {
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
