import CoalescingOperations
import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Downloads the bytes behind a URL and reports their progress: identical downloads (the same
/// URL) coalesce, so three views showing one image cost one download, and each view's progress
/// bar moves with it.
///
/// ```swift
/// manager.enqueue(
///     identifier: url.absoluteString, makeOperation: { DownloadOperation(url: url) },
///     progress: { print("\(Int(($0.fractionCompleted ?? 0) * 100))%") }
/// ) { result in print("downloaded", (try? result.get())?.count ?? 0, "bytes") }
/// ```
public final class DownloadOperation: CoalescibleOperation<Data>, @unchecked Sendable {
    // @unchecked: restated as Swift requires of an `Operation` subclass; `dataTask` is guarded by
    // `lock`, the other properties are immutable.

    /// The resource downloaded; also the operation's identifier.
    public let url: URL
    private let configuration: URLSessionConfiguration
    private let lock = NSLock()
    private var dataTask: URLSessionDataTask?

    /// Creates a download with no caller of its own, for the manager's `value` and
    /// `enqueue(identifier:…)` methods.
    ///
    /// - Parameters:
    ///   - url: The resource to download.
    ///   - configuration: The configuration of the session the download gets to itself, so that
    ///     its delegate sees the bytes arrive.
    public init(url: URL, configuration: URLSessionConfiguration = .default) {
        self.url = url
        self.configuration = configuration
        super.init(identifier: url.absoluteString)
    }

    /// Starts the data task; its delegate reports the bytes received and finishes the operation.
    public override func main() {
        let session = URLSession(configuration: configuration, delegate: Receiver(self), delegateQueue: nil)
        let task = session.dataTask(with: url)
        // Checked under the lock `cancel()` takes after marking the operation cancelled.
        let shouldStart = lock.withLock {
            guard !isCancelled else { return false }
            dataTask = task
            return true
        }
        if shouldStart {
            task.resume()
        }
        session.finishTasksAndInvalidate()
        if !shouldStart {
            task.cancel()
        }
    }

    /// Cancels the work for every caller and stops the data task; for an operation that joined
    /// other work, withdraws its caller only.
    public override func cancel() {
        super.cancel()
        lock.withLock { dataTask }?.cancel()
    }

    /// The session's delegate: gathers the bytes, reports each step, and finishes the download.
    private final class Receiver: NSObject, URLSessionDataDelegate, @unchecked Sendable {
        // @unchecked: `received` is only touched on the session's serial delegate queue.
        private let download: DownloadOperation
        private var received = Data()

        init(_ download: DownloadOperation) {
            self.download = download
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            received.append(data)
            let expected = dataTask.response?.expectedContentLength ?? -1
            download.report(progress: WorkProgress(completed: Int64(received.count), total: expected))
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
            // Out of `cancel()`'s reach first: FoundationNetworking calls this before the task
            // leaves its session, and cancelling it in between traps the process on Linux.
            download.lock.withLock { download.dataTask = nil }
            if let error {
                return download.finish(result: .failure(error))
            }
            let status = (task.response as? HTTPURLResponse)?.statusCode ?? 200
            guard (200..<300).contains(status) else {
                return download.finish(result: .failure(NetworkingError.invalidStatusCode(status)))
            }
            download.finish(result: .success(received))
        }
    }
}
