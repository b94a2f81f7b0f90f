import Foundation

/// The two Foundation knobs that decide how soon a queued operation runs.
struct OperationPriority: Equatable, Sendable {
    var queuePriority: Operation.QueuePriority
    var qualityOfService: QualityOfService

    /// Reads the operation's current priority. Call it only while no other thread can set it.
    init(of operation: Operation) {
        queuePriority = operation.queuePriority
        qualityOfService = operation.qualityOfService
    }

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
    fileprivate var urgency: Int {
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
