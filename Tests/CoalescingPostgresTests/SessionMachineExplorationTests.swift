#if Postgres
import XCTest

@testable import CoalescingPostgres

/// Guarantees 30, 31 and 34, checked on the session's state machine alone, without a database:
/// every order of the events of small scenarios, explored exhaustively, with the guarantees as
/// invariants after every step.
///
/// The test plays the storage's part and the database's: it sends the machine one event at a time,
/// carries the actions out itself, and answers the statements as PostgreSQL would (a lock another
/// process holds is not granted; a session's own locks are; a session's end releases them). A
/// session is had, refused or slow; a statement is answered, fails with an error of the database,
/// or its session is lost; another process publishes; steps ask, give up, lead, publish or abandon;
/// time moves in ticks; the coalescer stops, draining or not. A state seen before is not explored
/// again. A broken invariant fails with the events that led to it, one per line.
final class SessionMachineExplorationTests: XCTestCase {
    func testEveryInterleavingOfTwoStepsOnTwoLocksKeepsTheSessionsGuarantees() {
        explore(Scenario(locks: [1, 2], draining: true), name: "two locks, a graceful stop")
        explore(Scenario(locks: [1, 2], draining: false), name: "two locks, a stop at once")
    }

    func testEveryInterleavingOfTwoStepsWhoseLocksCollideKeepsTheSessionsGuarantees() {
        explore(Scenario(locks: [1, 1], draining: true), name: "one lock, a graceful stop")
    }

    // MARK: - The world

    typealias Machine = SessionStateMachine<Int, Int, Int>

    static let settings = Machine.Settings(
        connectTimeout: .seconds(1), silenceTimeout: .seconds(1), takeOverInterval: .seconds(1),
        keepAliveInterval: .seconds(1))
    /// Time moves a second a tick; past this, only events that take no time remain.
    static let horizon = Duration.seconds(3)

    /// Each step asks this often at most.
    static let asks = 1

    struct Scenario {
        /// Each step's lock: equal locks are two keys whose hashes collide.
        var locks: [Int64]
        var draining: Bool
    }

    /// A step of this process: its request on the way, what it leads.
    struct Step: Hashable {
        var lock: Int64
        var request: Int?
        var asked = 0
        /// The generation of the session whose lock it holds, while it leads.
        var leads: Int?
        /// Its result is handed to the session: it holds the lock until the result is sent.
        var publishing = false
    }

    /// The storage and the database, beside the machine.
    struct World: Hashable {
        var machine = Machine(settings: SessionMachineExplorationTests.settings)
        var now = Duration.zero
        var steps: [Step]
        var started = false
        /// The attempt to have a session in flight.
        var attempt: Int?
        var failedAttempts = 0
        /// The generation the statement loop serves, and the statement it runs.
        var serving: Int?
        var running: Machine.Next?
        var closed = false
        var losses = 0
        var reconnectDue = false
        var storageDone = false
        var stopped = false
        /// The locks the live session holds in the database, each as often as it was granted (a
        /// session's advisory locks stack), and those other processes hold.
        var held: [Int64: Int] = [:]
        var otherHolds: Set<Int64> = [1]
        var otherPublished = false
        /// Each request's time of asking, until it is answered; the requests answered.
        var askedAt: [Int: Duration] = [:]
        var answered: Set<Int> = []
        /// The last time a session was live, or `run()` started.
        var lastLive = Duration.zero
        /// Locks reported lost, by step and generation.
        var reportedLost: Set<[Int]> = []
    }

    // MARK: - Exploring

    private func explore(_ scenario: Scenario, name: String) {
        let first = World(steps: scenario.locks.map { Step(lock: $0) })
        var seen: Set<World> = [first]
        var frontier: [(World, [String])] = [(first, [])]
        var terminal = 0
        while let (world, trace) = frontier.popLast() {
            // A state that no move changes is an end: a statement loop that only waits counts.
            var ends = true
            for (label, move) in moves(world, scenario) {
                var next = world
                var failures: [String] = []
                move(&next, &failures)
                if next.serving != nil, !next.closed { next.lastLive = next.now }
                if next != world { ends = false }
                checkAlways(next, &failures)
                if !failures.isEmpty {
                    XCTFail(
                        "\(name): \(failures.joined(separator: "; "))\n" + (trace + [label]).joined(separator: "\n"))
                    return
                }
                if seen.insert(next).inserted { frontier.append((next, trace + [label])) }
            }
            if ends {
                terminal += 1
                checkEnd(world, trace)
            }
        }
        print("SessionMachineExplorationTests \(name): \(seen.count) states, \(terminal) ends")
    }

    typealias Move = (inout World, inout [String]) -> Void

    private func moves(_ world: World, _ scenario: Scenario) -> [(String, Move)] {
        var moves: [(String, Move)] = []
        if !world.started {
            moves.append(
                (
                    "run() starts",
                    { world, _ in
                        world.started = true
                        world.reconnectDue = true
                        world.lastLive = world.now
                    }
                ))
        }
        for index in world.steps.indices {
            let step = world.steps[index]
            if step.request == nil, step.leads == nil, step.asked < Self.asks {
                moves.append(
                    (
                        "step \(index) asks for lock \(step.lock)",
                        { world, failures in
                            let id = world.machine.reserveID()
                            world.askedAt[id] = world.now
                            world.steps[index].asked += 1
                            world.steps[index].request = id
                            switch world.machine.request(
                                id, lock: step.lock, key: "k\(index)", answerer: id, now: world.now)
                            {
                            case .queued:
                                break
                            case .refused(let answerer, let error):
                                Self.answer(&world, answerer, .failure(error), &failures)
                            }
                        }
                    ))
            }
            if let id = step.request {
                moves.append(
                    (
                        "step \(index) gives up",
                        { world, failures in
                            guard let answerer = world.machine.giveUp(id) else {
                                return failures.append("step \(index)'s request vanished unanswered")
                            }
                            Self.answer(&world, answerer, .failure(.databaseUnavailable("cancelled")), &failures)
                        }
                    ))
            }
            if let generation = step.leads, !step.publishing {
                let lock = step.lock
                moves.append(
                    (
                        "step \(index) publishes",
                        { world, _ in
                            world.steps[index].publishing = true
                            let publication = Publication(
                                Result<String, any Error>.success("v"), key: "k\(index)", lock: lock, started: 1,
                                generation: generation, limit: 100,
                                recorder: StepRecorder(logger: .init(label: "x"), observer: nil))
                            _ = world.machine.publish(publication)
                        }
                    ))
                moves.append(
                    (
                        "step \(index) abandons",
                        { world, _ in
                            world.steps[index].leads = nil
                            _ = world.machine.unlock(lock, .abandoned, generation: generation)
                        }
                    ))
            }
        }
        if world.started, world.reconnectDue, world.attempt == nil, world.serving == nil, !world.storageDone {
            moves.append(
                (
                    "the storage asks for a session",
                    { world, _ in
                        world.reconnectDue = false
                        switch world.machine.startConnecting(now: world.now) {
                        case .connect(let generation): world.attempt = generation
                        case .stop: world.storageDone = true
                        }
                    }
                ))
        }
        if let generation = world.attempt {
            moves.append(
                (
                    "session \(generation) connects",
                    { world, failures in
                        world.attempt = nil
                        switch world.machine.connected(generation, connection: generation, now: world.now) {
                        case .ready:
                            world.serving = generation
                            world.closed = false
                            world.lastLive = world.now
                        case .leave:
                            world.storageDone = true
                        }
                    }
                ))
            if world.failedAttempts < 2 {
                moves.append(
                    (
                        "session \(generation) is refused",
                        { world, failures in
                            world.attempt = nil
                            world.failedAttempts += 1
                            Self.end(&world, generation, &failures)
                        }
                    ))
            }
        }
        if let generation = world.serving {
            if world.running == nil {
                moves.append(
                    (
                        "the statement loop of \(generation) looks",
                        { world, failures in
                            let next = world.machine.nextStatement(generation, now: world.now)
                            switch next {
                            case .publish, .ask, .release: world.running = next
                            case .wait: break
                            case .leave:
                                world.serving = nil
                                world.held = [:]
                                world.storageDone = true
                            case .lost:
                                Self.end(&world, generation, &failures)
                            }
                        }
                    ))
            }
            if let running = world.running, !world.closed {
                moves.append(
                    (
                        "the statement of \(generation) is answered",
                        { world, failures in
                            Self.answerStatement(&world, generation, running, &failures)
                        }
                    ))
                if case .release = running {
                } else {
                    moves.append(
                        (
                            "the statement of \(generation) fails with an error of the database",
                            { world, failures in
                                if case .publish(let publications) = world.running {
                                    Self.published(&world, publications, generation)
                                }
                                world.running = nil
                                let answered = world.machine.failed(
                                    generation, .databaseError(sqlState: "42P01", message: "x"))
                                for (answerer, result) in answered.answers {
                                    Self.answer(&world, answerer, result, &failures)
                                }
                            }
                        ))
                }
            }
            if world.losses < 1, !world.closed {
                moves.append(
                    (
                        "session \(generation) closes (lost, or its watchdog)",
                        { world, failures in
                            world.losses += 1
                            world.closed = true
                            world.held = [:]
                            // The close future's report; the loop learns it at its next statement.
                            _ = Self.endReported(&world, generation, &failures)
                            if world.running != nil {
                                world.running = nil
                                Self.end(&world, generation, &failures)
                            }
                        }
                    ))
            }
        }
        if world.otherHolds.contains(1), !world.otherPublished {
            moves.append(
                (
                    "another process publishes lock 1's result and releases it",
                    { world, _ in
                        world.otherPublished = true
                        world.otherHolds.remove(1)
                        if let generation = world.serving, !world.closed {
                            _ = world.machine.heard(
                                .result(lock: 1, sequence: 9, started: 1, inline: nil), generation: generation)
                            _ = world.machine.heard(.released(lock: 1, published: true), generation: generation)
                        }
                    }
                ))
        }
        if world.started, world.now < Self.horizon {
            moves.append(
                (
                    "a second passes",
                    { world, failures in
                        world.now += .seconds(1)
                        let ticked = world.machine.tick(now: world.now, noSession: .databaseUnavailable("no session"))
                        for (answerer, error) in ticked.answers {
                            Self.answer(&world, answerer, .failure(error), &failures)
                        }
                        for (id, request) in world.machine.requests
                        where world.now >= world.askedAt[id]! + Self.settings.requestLimit {
                            failures.append("request \(id) of lock \(request.lock) outlived its deadline")
                        }
                    }
                ))
        }
        if !world.stopped {
            moves.append(
                (
                    "the coalescer stops\(scenario.draining ? ", draining" : " at once")",
                    { world, failures in
                        world.stopped = true
                        let stopped = world.machine.stop(draining: scenario.draining)
                        for (answerer, error) in stopped.answers {
                            Self.answer(&world, answerer, .failure(error), &failures)
                        }
                        if stopped.cancelAttempt, let generation = world.attempt {
                            world.attempt = nil
                            Self.end(&world, generation, &failures)
                        }
                    }
                ))
        }
        return moves
    }

    // MARK: - The storage's part

    private static func answer(
        _ world: inout World, _ id: Int, _ result: Result<LockAnswer, CoalescingPostgresError>,
        _ failures: inout [String]
    ) {
        if !world.answered.insert(id).inserted { failures.append("request \(id) was answered twice") }
        world.askedAt[id] = nil
        guard let index = world.steps.firstIndex(where: { $0.request == id }) else {
            return failures.append("request \(id) was answered, but no step waits for it")
        }
        world.steps[index].request = nil
        switch result {
        case .success(let answer):
            if answer.acquired { world.steps[index].leads = answer.generation }
        case .failure(.databaseUnavailable(let message))
        where !message.contains("no answer within") && !message.contains("shutting down") && message != "cancelled":
            // Guarantee 34: unavailable only when no session could be had within connectTimeout.
            if world.now - world.lastLive < settings.connectTimeout {
                failures.append(
                    "request \(id) was told the database is unavailable \(world.now - world.lastLive) after a live session"
                )
            }
        case .failure:
            break
        }
    }

    private static func answerStatement(
        _ world: inout World, _ generation: Int, _ running: Machine.Next, _ failures: inout [String]
    ) {
        world.running = nil
        var grants: [Machine.Grant] = []
        switch running {
        case .ask(let locks):
            for lock in locks {
                let granted = !world.otherHolds.contains(lock)
                if granted { world.held[lock, default: 0] += 1 }
                grants.append(Machine.Grant(granted: granted, sequence: 1))
            }
        case .release(let unlocks):
            for unlock in unlocks {
                world.held[unlock.lock]? -= 1
                if world.held[unlock.lock] == 0 { world.held[unlock.lock] = nil }
            }
        case .publish(let publications):
            published(&world, publications, generation)
        case .wait, .leave, .lost:
            break
        }
        let answered = world.machine.answered(generation, grants: grants, now: world.now)
        for (answerer, result) in answered.answers { answer(&world, answerer, result, &failures) }
    }

    /// Results sent (or refused): their steps no longer lead, their releases are queued.
    private static func published(_ world: inout World, _ publications: [Publication], _ generation: Int) {
        for publication in publications where publication.generation == generation {
            guard let index = Int(publication.key.dropFirst()), world.steps[index].publishing else { continue }
            world.steps[index].leads = nil
            world.steps[index].publishing = false
        }
    }

    /// The statement loop's end of a session, or a failed attempt: what the storage does next.
    private static func end(_ world: inout World, _ generation: Int, _ failures: inout [String]) {
        if world.serving == generation {
            world.serving = nil
            world.held = [:]
        }
        switch endReported(&world, generation, &failures) {
        case .reconnect: world.reconnectDue = true
        case .stop: world.storageDone = true
        }
    }

    private static func endReported(_ world: inout World, _ generation: Int, _ failures: inout [String])
        -> Machine.Ended.Next
    {
        let ended = world.machine.ended(generation, .databaseUnavailable("refused"), now: world.now)
        for (answerer, error) in ended.answers { answer(&world, answerer, .failure(error), &failures) }
        // Guarantee 30: a lost lock is reported once, for each step that led in that session.
        var leading = world.steps.indices.filter { world.steps[$0].leads == generation }
        if !ended.lost { leading = [] }
        let reported = ended.locksLost.compactMap { key in Int(key.dropFirst()) }
        if reported.sorted() != leading.sorted() {
            failures.append("session \(generation)'s end reported \(reported) lost, while \(leading) led")
        }
        for index in reported where !world.reportedLost.insert([index, generation]).inserted {
            failures.append("step \(index)'s lock in session \(generation) was reported lost twice")
        }
        for index in leading {
            world.steps[index].leads = nil
            world.steps[index].publishing = false
        }
        return ended.next
    }

    // MARK: - Invariants

    private func checkAlways(_ world: World, _ failures: inout [String]) {
        // No entry outlives its request: each request the machine keeps is one a step waits for.
        for id in world.machine.requests.keys where !world.steps.contains(where: { $0.request == id }) {
            failures.append("the machine keeps request \(id), which no step waits for")
        }
        for step in world.steps {
            if let id = step.request, world.machine.requests[id] == nil {
                failures.append("request \(id) is gone from the machine, unanswered")
            }
        }
        for (lock, key) in world.machine.leaders
        where world.machine.isLive(world.serving ?? 0) && world.held[lock] == nil {
            failures.append("the machine counts \(key) leading lock \(lock), which the session does not hold")
        }
    }

    /// Where nothing more can happen: every request answered, and a stopped coalescer stopped.
    private func checkEnd(_ world: World, _ trace: [String]) {
        var failures: [String] = []
        if world.stopped, case .stopped = world.machine.life {
        } else if world.stopped {
            failures.append("the coalescer stopped, but the session did not end: \(world.machine.life)")
        }
        if world.stopped, !world.storageDone, world.serving != nil {
            failures.append("the statement loop never ended")
        }
        for step in world.steps where step.request != nil {
            failures.append("a request was never answered")
        }
        if !failures.isEmpty {
            XCTFail(failures.joined(separator: "; ") + "\n" + trace.joined(separator: "\n"))
        }
    }
}

extension SessionStateMachine {
    /// Whether the session of `generation` is the live one.
    func isLive(_ generation: Int) -> Bool {
        switch life {
        case .ready(let live), .draining(let live): live.generation == generation
        case .idle, .connecting, .down, .stopped: false
        }
    }
}
#endif
