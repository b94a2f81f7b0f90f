#if canImport(os)
import os
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The cheapest non-recursive mutex of each platform, used in place in memory it does not own.
@usableFromInline
enum PlatformLock {
    #if canImport(os)
    @usableFromInline typealias Primitive = os_unfair_lock

    @usableFromInline
    static func initialize(_ lock: UnsafeMutablePointer<Primitive>) {
        lock.initialize(to: os_unfair_lock())
    }

    @usableFromInline
    static func deinitialize(_ lock: UnsafeMutablePointer<Primitive>) {
        lock.deinitialize(count: 1)
    }

    @inlinable
    static func lock(_ lock: UnsafeMutablePointer<Primitive>) {
        os_unfair_lock_lock(lock)
    }

    @inlinable
    static func unlock(_ lock: UnsafeMutablePointer<Primitive>) {
        os_unfair_lock_unlock(lock)
    }
    #else
    @usableFromInline typealias Primitive = pthread_mutex_t

    @usableFromInline
    static func initialize(_ lock: UnsafeMutablePointer<Primitive>) {
        lock.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(lock, nil)
        precondition(status == 0, "pthread_mutex_init failed with \(status)")
    }

    @usableFromInline
    static func deinitialize(_ lock: UnsafeMutablePointer<Primitive>) {
        pthread_mutex_destroy(lock)
        lock.deinitialize(count: 1)
    }

    @inlinable
    static func lock(_ lock: UnsafeMutablePointer<Primitive>) {
        pthread_mutex_lock(lock)
    }

    @inlinable
    static func unlock(_ lock: UnsafeMutablePointer<Primitive>) {
        pthread_mutex_unlock(lock)
    }
    #endif
}
