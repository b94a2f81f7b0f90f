import Foundation

/// One caller waiting for an operation's result.
@usableFromInline
enum Caller<Value> {
    /// A completion handler, called on `queue`, or on the thread that settles the work when
    /// `queue` is nil.
    case handler((Result<Value, Error>) -> Void, queue: OperationQueue?)
    /// An operation absorbed into the work: it never runs, and is settled with the work's result,
    /// serving its own callers.
    case operation(CoalescibleOperation<Value>)
}

/// The callers of one operation, in slots that stay valid when a caller withdraws.
///
/// Joining costs one append, whatever the number of callers. The list also tracks whether every
/// caller so far is a handler on one queue, so that the result can reach them all in one hop as
/// the list itself, without sorting them by queue.
@usableFromInline
struct Callers<Value> {
    /// A caller taken out of the list, with the priority it asked for.
    @usableFromInline
    struct Entry {
        @usableFromInline var caller: Caller<Value>
        /// The priority this caller asks for, if it states one.
        @usableFromInline var priority: OperationPriority?

        @inlinable
        init(caller: Caller<Value>, priority: OperationPriority?) {
            self.caller = caller
            self.priority = priority
        }
    }

    /// Whether every caller so far is a handler on one queue.
    @usableFromInline
    enum Queues {
        case none
        /// Every caller is a handler on this queue (nil: called on the settling thread).
        case one(OperationQueue?)
        /// Callers on several queues, or absorbed operations with callers of their own.
        case several
    }

    /// A withdrawn caller leaves a hole, so that the other slots stay valid.
    @usableFromInline var entries: ContiguousArray<Caller<Value>?> = []
    /// The priority each caller asks for, slot by slot, once any caller has stated one; empty
    /// until then. Apart from `entries`, so that handing out the result walks callers alone: with
    /// the priorities inline, fan-out cost 57 % more instructions per caller (BENCHMARKS.md).
    @usableFromInline var priorities: ContiguousArray<OperationPriority?> = []
    /// The callers still waiting: `entries` less its holes.
    @usableFromInline var live = 0
    @usableFromInline var queues = Queues.none
    /// Whether an absorbed operation is among the callers: such an operation may not itself be
    /// absorbed, so that settling never nests more than one level.
    private(set) var hasAbsorbed = false

    @inlinable
    init() {}

    /// Adds a caller; returns its slot.
    @inlinable
    mutating func add(_ caller: Caller<Value>, priority: OperationPriority?) -> Int {
        switch (caller, queues) {
        case (.handler(_, let queue), .none): queues = .one(queue)
        case (.handler(_, let queue), .one(let shared)) where shared === queue: break
        case (.operation, _): noteAbsorbed()
        case (.handler, _): queues = .several
        }
        if entries.count == 1 {
            // Work that one caller joins often draws a crowd: grow once, not at every doubling.
            entries.reserveCapacity(16)
        }
        entries.append(caller)
        if priority != nil || !priorities.isEmpty {
            if priorities.count == entries.count - 1 {
                priorities.append(priority)
            } else {
                priorities.reserveCapacity(entries.capacity)
                setPriority(priority, of: entries.count - 1)
            }
        }
        live += 1
        return entries.count - 1
    }

    @usableFromInline
    mutating func noteAbsorbed() {
        hasAbsorbed = true
        queues = .several
    }

    /// Records the priority of the caller in `slot`, filling in the slots before it.
    @usableFromInline
    mutating func setPriority(_ priority: OperationPriority?, of slot: Int) {
        while priorities.count <= slot {
            priorities.append(nil)
        }
        priorities[slot] = priority
    }

    /// The priority the caller in `slot` asks for.
    func priority(of slot: Int) -> OperationPriority? {
        priorities.indices.contains(slot) ? priorities[slot] : nil
    }

    /// Every priority a waiting caller asks for.
    var statedPriorities: [OperationPriority] {
        priorities.indices.compactMap { entries[$0] == nil ? nil : priorities[$0] }
    }

    /// Removes the caller in `slot`, if it is still there.
    mutating func remove(_ slot: Int?) -> Entry? {
        guard let slot, entries.indices.contains(slot), let caller = entries[slot] else { return nil }
        entries[slot] = nil
        live -= 1
        return Entry(caller: caller, priority: priority(of: slot))
    }

    /// Changes the priority of the caller in `slot`. Returns its previous priority (itself
    /// optional), or nil if the caller is gone.
    mutating func reprioritize(_ slot: Int, to priority: OperationPriority?) -> OperationPriority?? {
        guard entries.indices.contains(slot), entries[slot] != nil else { return nil }
        let previous = self.priority(of: slot)
        setPriority(priority, of: slot)
        return .some(previous)
    }
}

// MARK: - The result's way to the callers

extension ConcurrentOperation {
    /// Hands a decided result to everyone in `settlement`, in one straight line: absorbed
    /// operations are decided and their callers collected (one level deep, in a plain loop); the
    /// manager hears that the work ended; every lifecycle involved finishes, absorbed operations
    /// first; then the handlers run, grouped by queue.
    ///
    /// Absorbed operations finish before this one, so that once a queue sees this operation
    /// finished (and `waitUntilAllOperationsAreFinished()` returns), so have they.
    ///
    /// An absorbed operation that settles by itself (it was cancelled, or its last caller left)
    /// first leaves its host's work, for `reason`.
    @inlinable
    final func settle(
        _ settlement: Settlement<Value>, with result: Result<Value, Error>,
        leaving reason: WithdrawalReason = .withdrawn
    ) {
        if let host = settlement.host {
            host.operation.withdraw(host.slot, reason: reason, tellingCaller: false)
        }
        var delivery = Delivery<Value>()
        var absorbed = delivery.add(settlement.callers)
        // An absorbed operation cancelled or timed out at this moment has left by itself: it
        // counts as withdrawn, not served.
        var leaving: [WithdrawalReason] = []
        absorbed.removeAll { operation in
            switch operation.state.withLock({ $0.decideWithHost() }) {
            case .ride(let callers):
                _ = delivery.add(callers)
                return false
            case .left(let reason):
                leaving.append(reason)
                return true
            }
        }
        if let registration = settlement.registration {
            registration.manager.workEnded(
                self, registration, outcome: WorkOutcome(result),
                callersServed: settlement.callers.live - leaving.count,
                leaving: leaving)
        }
        for operation in absorbed {
            operation.finishLifecycle()
        }
        finishLifecycle()
        delivery.deliver(result)
    }

    /// Tells one caller that it stopped waiting, with `error`: it withdrew, timed out, or could not
    /// join. An absorbed operation is decided with the error and serves its own callers.
    @usableFromInline
    static func tell(_ caller: Caller<Value>, _ error: Error) {
        let failure = Result<Value, Error>.failure(error)
        switch caller {
        case .handler(let handler, queue: let queue?):
            queue.addOperation(DeliveryOperation { handler(failure) })
        case .handler(let handler, queue: nil):
            handler(failure)
        case .operation(let operation):
            if var settlement = operation.state.withLock({ $0.decide() }) {
                // Its host has already dropped it: that is how it came to be told.
                settlement.host = nil
                operation.settle(settlement, with: failure)
            }
        }
    }
}

/// Groups handlers by callback queue and hands the result over: one hop per distinct queue.
///
/// A million callers on one queue cost one queue hop and a loop, not a million hops or a million
/// nested closures, and the loop runs on the callers' queue, so the stack never grows with them.
/// When every caller shares one queue (the common case) their list moves into the hop whole,
/// untouched. Inlinable, so that the loops are specialized for the caller's `Value`.
@usableFromInline
struct Delivery<Value> {
    @usableFromInline typealias Entries = ContiguousArray<Caller<Value>?>

    /// Handlers that asked for no queue: served on the settling thread.
    @usableFromInline var inline: Entries = []
    @usableFromInline var groups: ContiguousArray<(queue: OperationQueue, entries: Entries)> = []
    /// Where each queue's group is; consulted only when a caller's queue differs from the last
    /// one's (a scan of the first few groups before it measured no faster).
    @usableFromInline var groupIndex: [ObjectIdentifier: Int] = [:]
    @usableFromInline var lastGroup = -1

    @inlinable
    init() {}

    /// Adds the handlers among `callers`, and returns the absorbed operations among them, for
    /// the caller to decide and add in turn.
    @inlinable
    mutating func add(_ callers: Callers<Value>) -> [CoalescibleOperation<Value>] {
        if case .one(let queue) = callers.queues, inline.isEmpty, groups.isEmpty {
            if let queue {
                groups.append((queue, callers.entries))
            } else {
                inline = callers.entries
            }
            return []
        }
        var absorbed: [CoalescibleOperation<Value>] = []
        for case let caller? in callers.entries {
            switch caller {
            case .handler(_, queue: nil):
                inline.append(caller)
            case .handler(_, queue: let queue?):
                groups[group(for: queue)].entries.append(caller)
            case .operation(let operation):
                absorbed.append(operation)
            }
        }
        return absorbed
    }

    /// Hands `result` to every handler: one operation per distinct queue, then the inline ones.
    @inlinable
    consuming func deliver(_ result: Result<Value, Error>) {
        for (queue, entries) in groups {
            queue.addOperation(DeliveryOperation { Self.serve(entries, with: result) })
        }
        Self.serve(inline, with: result)
    }

    @inlinable
    static func serve(_ entries: Entries, with result: Result<Value, Error>) {
        for case .handler(let handler, _)? in entries {
            handler(result)
        }
    }

    @inlinable
    mutating func group(for queue: OperationQueue) -> Int {
        if lastGroup >= 0, groups[lastGroup].queue === queue {
            return lastGroup
        }
        let id = ObjectIdentifier(queue)
        if let index = groupIndex[id] {
            lastGroup = index
        } else {
            lastGroup = groups.count
            groups.append((queue, []))
            groupIndex[id] = lastGroup
        }
        return lastGroup
    }
}

/// Serves a group of handlers on the queue it is added to.
///
/// Not generic: the closure is built where the result's type is known, so the loop inside it is
/// specialized rather than run through generic metadata.
@usableFromInline
final class DeliveryOperation: Operation, @unchecked Sendable {
    // @unchecked: `serve` is immutable and the queue hands the operation to one thread. The
    // handlers it calls are not `@Sendable` (the public API accepts any closure, as Foundation's
    // completion blocks do); each one is called once, on the queue its caller asked for.
    private let serve: () -> Void

    @usableFromInline
    init(serve: @escaping () -> Void) {
        self.serve = serve
    }

    @usableFromInline
    override func main() {
        serve()
    }

    /// Does nothing: a delivery carries results its callers are owed.
    ///
    /// Foundation's `start()` skips `main()` on a cancelled operation, so a delivery that could be
    /// cancelled would lose its callers' callbacks whenever something cancels the operations on
    /// their queue: ``OperationQueueManager/cancelAll()`` when the callback queue is the manager's
    /// own, `cancelAllOperations()` on a busy callback queue, or an app clearing its own queue.
    @usableFromInline
    override func cancel() {}
}
