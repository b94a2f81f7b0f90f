import Foundation

/// How soon an operation runs: the two Foundation knobs that decide it, taken together.
///
/// Coalesced work runs at the priority of its most urgent caller still waiting, and never below
/// what the app set on the operation itself. A caller states its priority through its operation's
/// `queuePriority` and `qualityOfService`, or with the `priority:` argument of the methods that
/// join with a handler alone.
public struct OperationPriority: Hashable, Sendable {
    /// The operation's place among the operations waiting on its queue.
    public var queuePriority: Operation.QueuePriority
    /// The class of the thread the operation runs on.
    public var qualityOfService: QualityOfService

    /// Creates a priority from its two knobs.
    ///
    /// - Parameters:
    ///   - queuePriority: The place among waiting operations. Defaults to `.normal`.
    ///   - qualityOfService: The thread's class. Defaults to `.default`.
    public init(queuePriority: Operation.QueuePriority = .normal, qualityOfService: QualityOfService = .default) {
        self.queuePriority = queuePriority
        self.qualityOfService = qualityOfService
    }

    /// Reads an operation's current priority: its two getters, which a subclass may override.
    init(of operation: Operation) {
        queuePriority = operation.queuePriority
        qualityOfService = operation.qualityOfService
    }

    /// The least urgent priority: what a caller that states none asks for.
    public static let lowest = OperationPriority(queuePriority: .veryLow, qualityOfService: .background)

    /// Each knob at the more urgent of the two values.
    func raised(to other: OperationPriority) -> OperationPriority {
        var raised = self
        if other.queuePriority.rawValue > queuePriority.rawValue {
            raised.queuePriority = other.queuePriority
        }
        if other.qualityOfService.urgency > qualityOfService.urgency {
            raised.qualityOfService = other.qualityOfService
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
