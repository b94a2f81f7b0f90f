#if canImport(os)
import os
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value that can only be read or changed while holding the lock stored beside it.
///
/// State and lock share one allocation (a `ManagedBuffer` whose header is the state and whose
/// single element is the lock), so guarding an operation's state costs one object, not two.
/// The lock is not recursive: never call back into code that may take it again while holding it.
struct LockedState<State>: @unchecked Sendable {
    // @unchecked: `State` is only ever touched inside `withLock`, under `buffer`'s mutex.
    private let buffer: Buffer

    init(_ initialState: State) {
        let buffer = Buffer.create(minimumCapacity: 1) { buffer in
            buffer.withUnsafeMutablePointerToElements { PlatformLock.initialize($0) }
            return initialState
        }
        // `create` is declared to return the base class; called on `Buffer`, it makes a `Buffer`.
        self.buffer = unsafeDowncast(buffer, to: Buffer.self)
    }

    /// Runs `body` with exclusive access to the state.
    @inline(__always)
    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        try buffer.withUnsafeMutablePointers { state, lock in
            PlatformLock.lock(lock)
            defer { PlatformLock.unlock(lock) }
            return try body(&state.pointee)
        }
    }

    private final class Buffer: ManagedBuffer<State, PlatformLock.Primitive> {
        deinit {
            withUnsafeMutablePointerToElements { PlatformLock.deinitialize($0) }
        }
    }
}

/// The cheapest non-recursive mutex of each platform.
private enum PlatformLock {
    #if canImport(os)
    typealias Primitive = os_unfair_lock

    static func initialize(_ lock: UnsafeMutablePointer<Primitive>) {
        lock.initialize(to: os_unfair_lock())
    }

    static func deinitialize(_ lock: UnsafeMutablePointer<Primitive>) {
        lock.deinitialize(count: 1)
    }

    static func lock(_ lock: UnsafeMutablePointer<Primitive>) {
        os_unfair_lock_lock(lock)
    }

    static func unlock(_ lock: UnsafeMutablePointer<Primitive>) {
        os_unfair_lock_unlock(lock)
    }
    #else
    typealias Primitive = pthread_mutex_t

    static func initialize(_ lock: UnsafeMutablePointer<Primitive>) {
        lock.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(lock, nil)
        precondition(status == 0, "pthread_mutex_init failed with \(status)")
    }

    static func deinitialize(_ lock: UnsafeMutablePointer<Primitive>) {
        pthread_mutex_destroy(lock)
        lock.deinitialize(count: 1)
    }

    static func lock(_ lock: UnsafeMutablePointer<Primitive>) {
        pthread_mutex_lock(lock)
    }

    static func unlock(_ lock: UnsafeMutablePointer<Primitive>) {
        pthread_mutex_unlock(lock)
    }
    #endif
}
