/// A self-pipe that lets one thread interrupt another thread's `poll()`.
///
/// Only the owning thread polls, drains and closes it. Other threads may call ``signal()`` only while the pipe is
/// registered in the server state and only under the state lock; the owner unregisters (under the lock) before
/// closing, so a signal can never hit a closed or reused descriptor.
final class WakePipe: Sendable {
    /// The end the owner polls.
    let readEnd: Int32
    private let writeEnd: Int32

    /// Creates a pipe, or returns `nil` if the process has run out of descriptors.
    init?() {
        guard let ends = SocketIO.makePipe() else { return nil }
        readEnd = ends.read
        writeEnd = ends.write
    }

    /// Makes the read end readable until the owner drains it.
    func signal() {
        SocketIO.writeByte(writeEnd)
    }

    /// Consumes pending signals so the next `poll()` blocks again.
    func drain() {
        SocketIO.drain(readEnd)
    }

    /// Closes both ends; call only after unregistering.
    func close() {
        SocketIO.closeDescriptor(readEnd)
        SocketIO.closeDescriptor(writeEnd)
    }
}
