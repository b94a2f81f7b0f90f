import Foundation

/// The command line of `coalescing-demo`.
struct DemoOptions {
    /// A real API to send the question requests to, instead of the embedded server.
    var baseURL: URL?
    /// Runs the same script with every caller on its own manager, for comparison.
    var coalescing = true

    static let usage = """
        usage: coalescing-demo [--no-coalescing] [--base-url URL]

        Plays an app launch against a local HTTP server and shows what coalescing saves.

          --no-coalescing   run the same script without coalescing, for comparison
          --base-url URL    send the question requests to URL (e.g. https://api.stackexchange.com)
                            instead of the embedded server; the user is then served in-process
          -h, --help        show this help
        """

    struct UsageError: Error, CustomStringConvertible {
        let description: String
    }

    /// Parses the arguments after the program's name.
    init(arguments: [String]) throws {
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            switch argument {
            case "--no-coalescing":
                coalescing = false
            case "--base-url":
                guard let value = remaining.popFirst() else { throw UsageError(description: "--base-url needs a URL") }
                guard let url = URL(string: value), url.scheme == "http" || url.scheme == "https", url.host != nil
                else {
                    throw UsageError(description: "--base-url: '\(value)' is not an http(s) URL")
                }
                baseURL = url
            case "-h", "--help":
                throw UsageError(description: "")
            default:
                throw UsageError(description: "unknown option '\(argument)'")
            }
        }
    }
}
