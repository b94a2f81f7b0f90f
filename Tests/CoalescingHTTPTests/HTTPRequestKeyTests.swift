import CoalescingHTTP
import Foundation
import XCTest

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The key decides whom a response may reach (Guarantees 40 and 41).
final class HTTPRequestKeyTests: XCTestCase {
    private func key(
        _ method: String = "GET", _ url: String = "https://api.example.com/me", headers: [String: String] = [:],
        body: HTTPRequestKey.Body = .none, sharing: HTTPSharing = .automatic, keying: HTTPKeying = .standard
    ) throws -> HTTPRequestKey {
        try HTTPRequestKey(
            method: method, url: URL(string: url), headers: headers.map { (name: $0.key, value: $0.value) },
            body: body, sharing: sharing, keying: keying)
    }

    /// Guarantee 40: two requests that differ only in `Authorization` never share.
    func testRequestsThatDifferOnlyInAuthorizationHaveDifferentKeys() throws {
        XCTAssertNotEqual(
            try key(headers: ["Authorization": "Bearer a"]), try key(headers: ["Authorization": "Bearer b"]))
        XCTAssertNotEqual(try key(headers: ["Authorization": "Bearer a"]), try key())
    }

    /// Guarantee 40: every header field is in the key, whatever the case of its name.
    func testEveryHeaderFieldIsInTheKeyWhateverItsCase() throws {
        for name in ["Cookie", "Accept-Language", "Accept", "Range", "If-None-Match", "X-Api-Key", "User-Agent"] {
            XCTAssertNotEqual(try key(headers: [name: "1"]), try key(headers: [name: "2"]), name)
        }
        XCTAssertEqual(try key(headers: ["accept-language": "de"]), try key(headers: ["Accept-Language": "de"]))
    }

    /// Guarantee 40: trace and request IDs name a call, not what it asks for.
    func testTraceContextAndRequestIDsAreLeftOut() throws {
        XCTAssertEqual(
            try key(headers: ["traceparent": "00-a-b-01", "X-Request-ID": "1"]),
            try key(headers: ["traceparent": "00-c-d-01", "X-Request-ID": "2"]))
    }

    /// Guarantee 41: only GET and HEAD share by default; a POST, or a GET with a body, shares with nobody.
    func testOnlySafeMethodsWithoutABodyShareByDefault() throws {
        XCTAssertTrue(try key("GET").shares)
        XCTAssertTrue(try key("head").shares)
        XCTAssertEqual(try key("get"), try key("GET"))
        XCTAssertFalse(try key("POST").shares)
        XCTAssertNotEqual(try key("POST"), try key("POST"))
        XCTAssertFalse(try key("GET", body: .bytes(Data("q".utf8))).shares)
        XCTAssertFalse(try key("DELETE").shares)
        XCTAssertFalse(try key(sharing: .never).shares)
    }

    /// Guarantee 41: a sharing key opts any method in; the body stays in the key.
    func testASharingKeyOptsAPostInWithItsBody() throws {
        let body = HTTPRequestKey.Body.bytes(Data("{}".utf8))
        XCTAssertEqual(
            try key("POST", body: body, sharing: .key("k1")), try key("POST", body: body, sharing: .key("k1")))
        XCTAssertNotEqual(
            try key("POST", body: body, sharing: .key("k1")), try key("POST", body: body, sharing: .key("k2")))
        XCTAssertNotEqual(
            try key("POST", body: body, sharing: .key("k1")),
            try key("POST", body: .bytes(Data("[]".utf8)), sharing: .key("k1")))
        XCTAssertNotEqual(try key(sharing: .key("k1")), try key())
    }

    /// Guarantee 41: a body the key cannot read (a stream) keeps its request to its caller, sharing
    /// key or not: two such bodies cannot be told apart.
    func testABodyTheKeyCannotReadSharesWithNobodyEvenUnderASharingKey() throws {
        XCTAssertFalse(try key("POST", body: .unreadable, sharing: .key("k1")).shares)
        XCTAssertNotEqual(
            try key("POST", body: .unreadable, sharing: .key("k1")),
            try key("POST", body: .unreadable, sharing: .key("k1")))
    }

    /// Guarantee 41: the unsafe widenings do what they say, and credentials never leave the key.
    func testTheUnsafeWideningsWidenAndCredentialsStay() throws {
        let keying = HTTPKeying.standard.unsafeIgnoringHeaders(["Accept-Language"]).unsafeSharingMethods(["post"])
        XCTAssertEqual(
            try key(headers: ["Accept-Language": "de"], keying: keying),
            try key(headers: ["Accept-Language": "fr"], keying: keying))
        let query = HTTPRequestKey.Body.bytes(Data("{ me { name } }".utf8))
        XCTAssertEqual(try key("POST", body: query, keying: keying), try key("POST", body: query, keying: keying))
        XCTAssertNotEqual(
            try key("POST", body: query, keying: keying), try key("POST", body: .bytes(Data("x".utf8)), keying: keying))
        XCTAssertEqual(HTTPKeying.credentialHeaders, ["authorization", "proxy-authorization", "cookie"])
    }

    /// Guarantee 42: a request that cannot be sent is refused when its key is built.
    func testARequestWithoutAURLOrWithAnotherSchemeIsInvalid() throws {
        for url in ["ftp://example.com/file", "file:///etc/hosts", "mailto:a@b.c"] {
            XCTAssertThrowsError(try key("GET", url)) { error in
                guard case HTTPCoalescingError.invalidRequest = error else { return XCTFail("\(error)") }
            }
        }
        XCTAssertThrowsError(
            try HTTPRequestKey(method: "GET", url: nil, headers: [], body: .none)
        ) { XCTAssertEqual($0 as? HTTPCoalescingError, .invalidRequest("the request has no URL")) }
    }

    /// Guarantee 40: a key's description names its header fields, never their values.
    func testTheDescriptionNamesHeaderFieldsWithoutTheirValues() throws {
        let described = try key(headers: ["Authorization": "Bearer secret", "Accept": "application/json"]).description
        XCTAssertEqual(described, "GET https://api.example.com/me [accept, authorization]")
        XCTAssertFalse(described.contains("secret"))
        XCTAssertEqual(try key(headers: ["A": "1"]).identifier, try key(headers: ["a": "1"]).identifier)
        XCTAssertNotEqual(try key(headers: ["A": "1,b"]).identifier, try key(headers: ["A": "1", "b": ""]).identifier)
    }
}
