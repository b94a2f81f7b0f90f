import Foundation

// Linux: URLSession and its types live in FoundationNetworking; on Apple platforms, in Foundation.
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Turns what a data task hands its completion into a decoded value or an error, checking in
/// order: the transport error, an HTTP response, a 2xx status, a non-empty body, valid JSON.
///
/// Public for the demo, whose question requests go through `CoalescingHTTP` and decode as
/// ``QuestionsFetchOperation`` does.
public enum HTTPResponseDecoder {
    /// Decodes what a data task handed its completion.
    ///
    /// - Parameters:
    ///   - type: The type of the value the body holds as JSON.
    ///   - data: The body, if any.
    ///   - response: The response, if any.
    ///   - error: The transport error, if any: it wins over everything else.
    /// - Returns: The value; the transport error as it is; or a ``NetworkingError``.
    public static func decode<Value: Decodable>(
        _ type: Value.Type, data: Data?, response: URLResponse?, error: Error?
    ) -> Result<Value, Error> {
        if let error {
            return .failure(error)
        }
        guard let response = response as? HTTPURLResponse else {
            return .failure(NetworkingError.missingData)
        }
        guard (200...299).contains(response.statusCode) else {
            return .failure(NetworkingError.invalidStatusCode(response.statusCode))
        }
        guard let data, !data.isEmpty else {
            return .failure(NetworkingError.missingData)
        }
        do {
            return .success(try JSONDecoder().decode(Value.self, from: data))
        } catch let error as DecodingError {
            return .failure(NetworkingError(error))
        } catch {
            return .failure(NetworkingError.serialization)
        }
    }
}
