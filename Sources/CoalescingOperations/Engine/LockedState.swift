#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value that can only be read or changed while holding the lock stored beside it.
///
/// State and lock share one allocation (a `ManagedBuffer` whose header is the state and whose
/// single element is the lock), so guarding an operation's state costs one object, not two. The
/// lock is not recursive: never call code that may take it again while holding it.
///
/// The lock is a POSIX mutex, used in place in memory it does not own: one implementation on every
/// platform, the one this package's tests and sanitizer runs exercise. Every pthread call's result
/// is checked: a failure means memory corruption or a lock used after it was destroyed, and going
/// on would break every guarantee built on it.
///
/// `Sendable` only when its state is. Types that keep non-`Sendable` state here (completion
/// handlers, say) declare themselves `@unchecked Sendable` and name this lock as the reason.
///
/// `withLock` is inlinable, like the hot paths that use it, so that client code is specialized
/// for its `State` instead of going through generic metadata on every call.
@usableFromInline struct LockedState<State> {
    @usableFromInline let buffer: Buffer

    @inlinable init(_ initialState: State) {
        let buffer = Buffer.create(minimumCapacity: 1) { buffer in
            buffer.withUnsafeMutablePointerToElements { lock in
                lock.initialize(to: pthread_mutex_t())
                Self.check(pthread_mutex_init(lock, nil), "pthread_mutex_init")
            }
            return initialState
        }
        // `create` is declared to return the base class; called on `Buffer`, it makes a `Buffer`.
        self.buffer = unsafeDowncast(buffer, to: Buffer.self)
    }

    /// Runs `body` with exclusive access to the state.
    @inlinable @inline(__always) func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        try buffer.withUnsafeMutablePointers { state, lock in
            Self.check(pthread_mutex_lock(lock), "pthread_mutex_lock")
            defer { Self.check(pthread_mutex_unlock(lock), "pthread_mutex_unlock") }
            return try body(&state.pointee)
        }
    }

    @inlinable static func check(_ status: Int32, _ call: StaticString) {
        precondition(status == 0, "\(call) failed with \(status)")
    }

    @usableFromInline final class Buffer: ManagedBuffer<State, pthread_mutex_t> {
        deinit {
            withUnsafeMutablePointerToElements { lock in
                LockedState.check(pthread_mutex_destroy(lock), "pthread_mutex_destroy")
                lock.deinitialize(count: 1)
            }
        }
    }
}

// @unchecked: the buffer's header (the state) is only touched inside `withLock`, under the lock
// in its element; `ManagedBuffer` itself cannot be `Sendable`. A state that may not cross threads
// keeps the whole box from being `Sendable`.
extension LockedState: @unchecked Sendable where State: Sendable {}
