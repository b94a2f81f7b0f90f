import CoalescingOperations
import Examples
import Foundation
import HTTPStub
import TestSupport
import XCTest

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The download example against an HTTPStub: Guarantees 1 (identical downloads reach the server
/// once) and 24 (every caller that asked sees the download's progress, on its own queue, before
/// its bytes) (see the Guarantees article), through a real `URLSession` delegate.
final class DownloadOperationTests: XCTestCase {
    private let body = Data((0..<64 * 1024).map { UInt8(truncatingIfNeeded: $0) })

    func testThreeViewsShareOneDownloadAndEachSeesItsProgressBeforeItsBytes() {
        let stub = HTTPStub(routes: [
            "/avatar.png": StubResponse(headers: ["Content-Length": "\(body.count)"], body: body)
        ])
        defer { stub.stop() }
        let configuration = URLSessionConfiguration.ephemeral
        stub.configure(configuration)
        let url = stub.url(for: "/avatar.png")
        let manager = OperationQueueManager()
        stub.holdResponses()

        let views = ["header", "list", "detail"]
        let seen = LockedBox<[String: [String]]>([:])
        let done = DispatchGroup()
        for view in views {
            let queue = Queues.serial(view)
            done.enter()
            manager.enqueue(
                identifier: url.absoluteString, callBackQueue: queue,
                makeOperation: { DownloadOperation(url: url, configuration: configuration) },
                progress: { progress in
                    let onItsQueue = OperationQueue.current === queue
                    seen.mutate { $0[view, default: []].append(onItsQueue ? "\(progress)" : "off its queue") }
                },
                completionHandler: { result in
                    seen.mutate { $0[view, default: []].append("\((try? result.get())?.count ?? -1) bytes") }
                    done.leave()
                })
        }
        XCTAssertTrue(stub.waitForRequests(1, timeout: .seconds(10)))
        stub.releaseResponses()
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)

        XCTAssertEqual(stub.requestCount, 1, "one download for three views")
        for view in views {
            let calls = seen.value[view] ?? []
            XCTAssertEqual(calls.last, "\(body.count) bytes", "\(view): \(calls)")
            XCTAssertEqual(calls.dropLast().last, "\(body.count) of \(body.count)", "\(view): \(calls)")
            XCTAssertFalse(calls.contains("off its queue"), "\(view): \(calls)")
        }
    }
}
