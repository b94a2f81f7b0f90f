import Foundation

/// The command line of `coalescing-demo`.
struct DemoOptions {
    /// A real API to send the question requests to, instead of the embedded server.
    var baseURL: URL?
    /// Runs the same script with every caller on its own manager, for comparison.
    var coalescing = true
    /// Runs the script twice, with and without coalescing, and prints the two side by side.
    var compare = false
    /// How long the embedded server (or, with `--base-url`, the in-process user service) takes to
    /// answer: what decides whether callers overlap, and so what coalescing can save.
    var latency: Duration = .milliseconds(250)
    /// Prints every event the library reports, as it happens.
    var printsEvents = false

    static let usage = """
        usage: coalescing-demo [--latency MS] [--no-coalescing | --compare] [--base-url URL] [--events]

        Plays an app launch against an embedded server and shows what coalescing saves. The
        embedded server runs in-process: it answers the app's URLSession through a URLProtocol,
        and counts every request the session sends.

          --latency MS      the embedded server answers each request after MS milliseconds
                            (default 250); with --base-url, the in-process user service does
          --no-coalescing   run the same launch without coalescing
          --compare         run the launch with and without coalescing, and print both side by side
          --base-url URL    send the question requests to the server at URL instead of the
                            embedded server; the user is then served in-process. The demo asks
                              GET URL/2.3/questions?page=N&order=desc&sort=activity&site=stackoverflow
                            and expects the Stack Exchange API's JSON (as https://api.stackexchange.com
                            answers it):
                              {"items": [{"question_id": 1, "title": "…", "link": "https://…",
                                          "score": 3, "is_answered": true, "tags": ["swift"]}],
                               "has_more": true}
          --events          print each event the library reports (work started, caller joined,
                            work ended…) as it happens
          -h, --help        show this help

        Exits with status 1 if any caller failed, printing one line per failure to standard error.
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
            case "--compare":
                compare = true
            case "--events":
                printsEvents = true
            case "--latency":
                guard let value = remaining.popFirst(), let milliseconds = Int(value),
                    (0...60_000).contains(milliseconds)
                else {
                    throw UsageError(description: "--latency needs a number of milliseconds from 0 to 60000")
                }
                latency = .milliseconds(milliseconds)
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
        if compare && !coalescing {
            throw UsageError(description: "--compare runs both ways; leave out --no-coalescing")
        }
    }
}
