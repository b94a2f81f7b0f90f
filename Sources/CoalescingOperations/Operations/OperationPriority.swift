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
    @usableFromInline
    init(of operation: Operation) {
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

/// The priority of work waiting on its queue: the operation's own, raised to the most urgent of
/// its callers still waiting, and written to Foundation by one thread at a time.
///
/// Foundation's priority setters are not safe to call from two threads at once, and may post KVO,
/// so they are called with no lock held, by whichever thread holds `isApplying`.
@usableFromInline
struct PriorityTracker {
    /// What the app set on the operation itself: the floor.
    private var own: OperationPriority
    /// How many waiting callers ask for each level of each knob.
    private var demands = Demands()
    /// What was last written to Foundation.
    private var applied: OperationPriority
    private var isApplying: Bool

    /// Tracks an operation whose priority is `own`; the thread that admits it applies changes
    /// until it has added the operation to its queue.
    init(own: OperationPriority) {
        self.own = own
        applied = own
        isApplying = true
    }

    /// The priority the work should have now.
    var target: OperationPriority {
        demands.highest.map { own.raised(to: $0) } ?? own
    }

    /// Records a waiting caller's priority. Returns whether the calling thread must apply it.
    @usableFromInline
    mutating func demand(_ priority: OperationPriority) -> Bool {
        demands.add(priority, count: 1)
        return claimApplying()
    }

    /// Forgets a caller's priority when it withdraws. Returns whether the calling thread must apply.
    mutating func release(_ priority: OperationPriority) -> Bool {
        demands.add(priority, count: -1)
        return claimApplying()
    }

    /// Changes the operation's own priority. Returns whether the calling thread must apply it.
    mutating func setOwn(_ change: (inout OperationPriority) -> Void) -> Bool {
        change(&own)
        return claimApplying()
    }

    /// The next priority to write, or nil (and the right to apply released) when Foundation has it.
    mutating func next() -> OperationPriority? {
        let target = target
        guard target != applied else {
            isApplying = false
            return nil
        }
        applied = target
        return target
    }

    private mutating func claimApplying() -> Bool {
        guard !isApplying, target != applied else { return false }
        isApplying = true
        return true
    }

    /// Counts of waiting callers per level of each knob, so that the most urgent one left is found
    /// in constant time when a caller withdraws. Allocated when the first caller states a priority.
    private struct Demands {
        /// Five counts for `queuePriority` (its raw values -8, -4, 0, 4, 8), then five for
        /// `qualityOfService` (by urgency), least urgent first.
        private var counts: [Int32] = []
        private static let services: [QualityOfService] = [
            .background, .utility, .default, .userInitiated, .userInteractive,
        ]

        mutating func add(_ priority: OperationPriority, count: Int32) {
            if counts.isEmpty {
                counts = Array(repeating: 0, count: 10)
            }
            counts[min(max((Int(priority.queueLevel) + 8) / 4, 0), 4)] += count
            counts[5 + priority.qualityOfService.urgency] += count
        }

        var highest: OperationPriority? {
            guard !counts.isEmpty, let queue = (0..<5).last(where: { counts[$0] > 0 }),
                let service = (5..<10).last(where: { counts[$0] > 0 })
            else { return nil }
            var highest = OperationPriority(qualityOfService: Self.services[service - 5])
            highest.queueLevel = Int8(queue * 4 - 8)
            return highest
        }
    }
}
