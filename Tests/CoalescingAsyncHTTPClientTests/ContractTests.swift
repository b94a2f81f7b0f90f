#if AsyncHTTPClient
import AsyncHTTPClient
import CoalescingAsyncHTTPClient
import CoalescingHTTP
import CoalescingOperations
import Foundation
import HTTPContract
import NIOCore
import XCTest

/// `CoalescingHTTPClient` keeps the contract both HTTP clients promise (Guarantees 36 and 40 to
/// 43), over a real socket: the same clauses `CoalescingURLSession` is held to.
final class CoalescingHTTPClientContractTests: XCTestCase {
    /// Guarantees 36 and 40 to 43: every clause of the shared contract holds for the client.
    func testTheClientKeepsEveryClauseOfTheSharedContract() async throws {
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        for (name, check) in HTTPContract.clauses {
            do {
                try await check { maximumBodySize, observer in
                    HTTPClientContractClient(
                        http: CoalescingHTTPClient(client: client, maximumBodySize: maximumBodySize, observer: observer)
                    )
                }
            } catch {
                XCTFail("\(name): \(error)")
            }
        }
        try await client.shutdown()
    }
}

/// A `CoalescingHTTPClient` as the contract drives it.
private struct HTTPClientContractClient: ContractClient {
    let http: CoalescingHTTPClient

    func send(
        _ request: ContractRequest, sharing: HTTPSharing, timeout: Duration?,
        progress: (@Sendable (WorkProgress) -> Void)?
    ) async throws -> ContractResponse {
        let response = try await http.execute(
            clientRequest(request), sharing: sharing, timeout: timeout, progress: progress)
        return ContractResponse(status: Int(response.status.code), body: Data(buffer: response.body))
    }

    func key(for request: ContractRequest, sharing: HTTPSharing) throws -> HTTPRequestKey {
        try http.key(for: clientRequest(request), sharing: sharing)
    }

    func forget(_ request: ContractRequest, sharing: HTTPSharing) -> Bool {
        http.forget(clientRequest(request), sharing: sharing)
    }

    func cancel(_ request: ContractRequest, sharing: HTTPSharing) -> Bool {
        http.cancel(clientRequest(request), sharing: sharing)
    }

    var statistics: CoalescingStatistics { http.statistics }

    private func clientRequest(_ request: ContractRequest) -> HTTPClientRequest {
        var clientRequest = HTTPClientRequest(url: request.url)
        clientRequest.method = .init(rawValue: request.method)
        for (name, value) in request.headers { clientRequest.headers.add(name: name, value: value) }
        if let body = request.body { clientRequest.body = .bytes(ByteBuffer(bytes: body)) }
        return clientRequest
    }
}
#endif
