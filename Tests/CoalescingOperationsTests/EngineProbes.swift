@testable import CoalescingOperations

// What tests read of the engine and nobody else may: how many callers wait for one key, how many
// results are stored. Here rather than in the library, which then holds no code for its tests.

extension OperationQueueManager {
    /// How many callers wait for the work in flight for `identifier` and `valueType`.
    func callerCount<Value: Sendable>(identifier: String, valueType: Value.Type) -> Int {
        engine.callerCount(for: OperationKey(identifier: identifier, valueType: valueType), as: Value.self)
    }
}

extension InFlightTaskCoalescer {
    /// How many callers wait for the work in flight for `key`.
    func callerCount(for key: Key) -> Int {
        engine.callerCount(for: key, as: Value.self)
    }
}

extension PrefetchableTaskCoalescer {
    /// How many callers wait for the work in flight for `key`.
    func callerCount(for key: Key) -> Int {
        engine.callerCount(for: key, as: Value.self)
    }

    /// How many results are stored, expired or not.
    var storedCount: Int {
        engine.state.withLock { $0.index.works.count { if case .stored = $0.stage { true } else { false } } }
    }
}

extension Engine {
    fileprivate func callerCount<Value: Sendable>(for key: Key, as _: Value.Type) -> Int {
        state.withLock { machine in
            guard let work = machine.inFlight(key, hash: key.hashValue, as: Value.self) else { return 0 }
            return work.state.callers.live
        }
    }
}
