import CoalescingHTTP
import CoalescingOperations
import Foundation
import HTTPContract
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `CoalescingURLSession` keeps the contract both HTTP clients promise (Guarantees 36 and 40 to
/// 43), over a real socket.
final class CoalescingURLSessionContractTests: XCTestCase {
    /// Guarantees 36 and 40 to 43: every clause of the shared contract holds for the session.
    func testTheSessionKeepsEveryClauseOfTheSharedContract() async throws {
        for (name, check) in HTTPContract.clauses {
            do {
                try await check { maximumBodySize, observer in
                    URLSessionContractClient(
                        http: CoalescingURLSession(
                            configuration: .ephemeral, maximumBodySize: maximumBodySize, observer: observer))
                }
            } catch {
                XCTFail("\(name): \(error)")
            }
        }
    }
}

/// A `CoalescingURLSession` as the contract drives it.
private struct URLSessionContractClient: ContractClient {
    let http: CoalescingURLSession

    func send(
        _ request: ContractRequest, sharing: HTTPSharing, timeout: Duration?,
        progress: (@Sendable (WorkProgress) -> Void)?
    ) async throws -> ContractResponse {
        let (data, response) = try await http.data(
            for: urlRequest(request), sharing: sharing, timeout: timeout, progress: progress)
        return ContractResponse(status: (response as? HTTPURLResponse)?.statusCode ?? -1, body: data)
    }

    func key(for request: ContractRequest, sharing: HTTPSharing) throws -> HTTPRequestKey {
        try http.key(for: urlRequest(request), sharing: sharing)
    }

    func forget(_ request: ContractRequest, sharing: HTTPSharing) -> Bool {
        http.forget(urlRequest(request), sharing: sharing)
    }

    func cancel(_ request: ContractRequest, sharing: HTTPSharing) -> Bool {
        http.cancel(urlRequest(request), sharing: sharing)
    }

    var statistics: CoalescingStatistics { http.statistics }

    private func urlRequest(_ request: ContractRequest) -> URLRequest {
        var urlRequest = URLRequest(url: URL(string: request.url)!)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        urlRequest.httpBody = request.body
        return urlRequest
    }
}
