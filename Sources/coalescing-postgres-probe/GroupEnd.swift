// The service group an app runs, for the tests of Guarantee 34's last promise (issue 38, item 3):
// the app's own PostgresClient, a PostgresCoalescer on it, and a service of the app beside them
// that fails, or waits for a graceful shutdown. The process must end in every case.
#if Postgres
import CoalescingPostgres
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

enum GroupEnd {
    /// Why the app's service fails: the probe's own error, so that the test can tell it from
    /// anything else the group might throw.
    struct ServiceFailed: Error, CustomStringConvertible {
        var description: String { "the app's service failed" }
    }

    /// The app's service beside the coalescer: it sends one value through the database, says so,
    /// then does what the scenario asks.
    struct AppService: Service {
        let scenario: String
        let coalescer: PostgresCoalescer<String>
        let failAfter: Duration

        func run() async throws {
            switch scenario {
            case "readiness":
                // As a readiness check in Hummingbird's `beforeServerStarts` does: the session is
                // starting or up, and the check fails the start.
                Probe.say("checking")
                try await coalescer.checkSchema()
                Probe.say("schema ready")
            case "service-throws", "sigterm":
                let value = try await coalescer.value(key: "group-end-\(getpid())") { "through the database" }
                let ranHere = coalescer.statistics.runsHere
                Probe.say("first value: \(value), runs here \(ranHere), session ready \(coalescer.isSessionReady)")
                if scenario == "sigterm" {
                    Probe.say("ready")
                    try await gracefulShutdown()
                    return
                }
                try await Task.sleep(for: failAfter)
                throw ServiceFailed()
            default:
                throw ServiceFailed()
            }
        }
    }

    /// Runs the group and exits: 1 with `error: …` when it threw, 0 with `ended` when it ended.
    static func run(scenario: String, url: String, table: String, failAfter: Duration) async -> Never {
        var logger = Logger(label: "probe-group")
        logger.logLevel = .error
        do {
            var clientConfiguration = try PostgresClient.Configuration(coalescingURL: url)
            clientConfiguration.options.maximumConnections = 4
            let client = PostgresClient(configuration: clientConfiguration, backgroundLogger: logger)
            var configuration = PostgresCoalescerConfiguration()
            configuration.table = table
            // The readiness scenario's schema is never there: the check must fail the start.
            configuration.createsTable = scenario != "readiness"
            let coalescer = try PostgresCoalescer<String>(
                client: client, configuration: configuration, logger: logger)
            let app = AppService(scenario: scenario, coalescer: coalescer, failAfter: failAfter)
            let group = ServiceGroup(
                configuration: .init(
                    services: [client, coalescer, app], gracefulShutdownSignals: [.sigterm], cancellationSignals: [],
                    logger: logger))
            try await group.run()
            Probe.say("ended")
            exit(0)
        } catch {
            Probe.say("error: \(error)")
            exit(1)
        }
    }
}
#endif
