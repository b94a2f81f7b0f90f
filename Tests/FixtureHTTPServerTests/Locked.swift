import Foundation

/// A value shared between a test and URLSession completion handlers.
///
/// `@unchecked Sendable` because `lock` guards `storage`: it is only touched inside `lock.withLock`.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: Value

    init(_ value: Value) {
        storage = value
    }

    var value: Value {
        get { lock.withLock { storage } }
        set { lock.withLock { storage = newValue } }
    }
}
