/// A value that can only be read or changed while holding the lock stored beside it.
///
/// State and lock share one allocation (a `ManagedBuffer` whose header is the state and whose
/// single element is the lock), so guarding an operation's state costs one object, not two.
/// The lock is not recursive: never call back into code that may take it again while holding it.
///
/// `withLock` is inlinable, like the hot paths that use it, so that client code is specialized
/// for its `Value` types instead of going through generic metadata on every call.
@usableFromInline
struct LockedState<State>: @unchecked Sendable {
    // @unchecked: `State` is only ever touched inside `withLock`, under `buffer`'s mutex.
    @usableFromInline let buffer: Buffer

    @usableFromInline
    init(_ initialState: State) {
        let buffer = Buffer.create(minimumCapacity: 1) { buffer in
            buffer.withUnsafeMutablePointerToElements { PlatformLock.initialize($0) }
            return initialState
        }
        // `create` is declared to return the base class; called on `Buffer`, it makes a `Buffer`.
        self.buffer = unsafeDowncast(buffer, to: Buffer.self)
    }

    /// Runs `body` with exclusive access to the state.
    @inlinable @inline(__always)
    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        try buffer.withUnsafeMutablePointers { state, lock in
            PlatformLock.lock(lock)
            defer { PlatformLock.unlock(lock) }
            return try body(&state.pointee)
        }
    }

    @usableFromInline
    final class Buffer: ManagedBuffer<State, PlatformLock.Primitive> {
        deinit {
            withUnsafeMutablePointerToElements { PlatformLock.deinitialize($0) }
        }
    }
}
