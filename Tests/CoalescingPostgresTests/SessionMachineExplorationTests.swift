#if Postgres
import XCTest

@testable import CoalescingPostgres

/// Guarantees 28, 30, 31 and 34, checked on the session's state machine and the steps' machines
/// alone, without a database: every order of the events of small scenarios, explored
/// exhaustively, with the guarantees as invariants after every step.
///
/// The test plays the storages' part and the database's: it sends the machines one event at a
/// time, carries the actions out itself, and answers the statements as PostgreSQL would (a lock
/// another process holds is not granted; a session's own locks are; a session's end releases them
/// and its watches; a notification reaches the session only while it holds the key's watch, and
/// may be heard after the answer of the statement that followed its commit, but never after the
/// next one's). A session is had, refused, closed before it is ready, or lost; a statement is
/// answered or fails with an error of the database; another process's leader publishes, gives up
/// or dies, and another run may follow; steps arrive, look, ask, give up, lead, publish or abandon,
/// each through its own ``StepStateMachine``; time moves in ticks; the coalescer stops, draining
/// or not. A state seen before is not explored again. A broken invariant fails with the events
/// that led to it, one per line.
final class SessionMachineExplorationTests: XCTestCase {
    func testEveryInterleavingOfTwoStepsOnTwoLocksKeepsTheSessionsGuarantees() {
        explore(
            Scenario(
                steps: [(1, false), (2, false)], draining: true, refusals: 1, horizon: .seconds(2), faults: false),
            name: "two locks, a graceful stop")
        explore(
            Scenario(
                steps: [(1, false), (2, false)], draining: false, refusals: 1, horizon: .seconds(2), faults: false),
            name: "two locks, a stop at once")
    }

    func testEveryInterleavingOfTwoStepsWhoseLocksCollideKeepsTheSessionsGuarantees() {
        explore(
            Scenario(
                steps: [(1, false), (1, false)], draining: true, refusals: 1, horizon: .seconds(2), faults: false),
            name: "one lock, a graceful stop")
    }

    // Guarantees 28, 30 and 34: one step against another process's leader that publishes, gives
    // up or dies, through sessions lost, refused or closed before they are ready.
    func testEveryInterleavingOfOneStepAndALeaderElsewhereKeepsTheSessionsGuarantees() {
        explore(Scenario(steps: [(1, false)], draining: true, asks: 2), name: "one step, a leader elsewhere")
    }

    // Guarantees 30 and 35: a forgetting step, refused by a run after one that published, counts
    // a take-over exactly when the run it waited for ended without a result (the defect of
    // 78667dc, when a release heard before the last refusal decided).
    func testEveryInterleavingOfAForgettingStepAndTwoRunsElsewhereCountsTakeOversRight() {
        explore(
            Scenario(steps: [(1, true)], draining: false, otherRuns: 2, asks: 3, losses: 0, refusals: 1),
            name: "a forgetting step, two runs elsewhere")
    }

    // MARK: - The world

    typealias Machine = SessionStateMachine<Int, Int, Int>

    static let settings = Machine.Settings(
        connectTimeout: .seconds(1), silenceTimeout: .seconds(1), takeOverInterval: .seconds(1),
        keepAliveInterval: .seconds(1))

    struct Scenario {
        /// Each step's lock (equal locks are two keys whose hashes collide) and whether it forgets.
        var steps: [(lock: Int64, freshOnly: Bool)]
        var draining: Bool
        /// How many runs another process makes on lock 1, one after the other.
        var otherRuns = 1
        /// How often each step asks at most.
        var asks = 1
        /// How many sessions may be lost, and how many attempts refused.
        var losses = 1
        var refusals = 2
        /// Time moves a second a tick until here; then only events that take no time remain.
        var horizon = Duration.seconds(3)
        /// Whether another process's leader may also give up or die, and a session close before
        /// it is ready: the one-step scenarios explore them, the two-step ones would not end.
        var faults = true

        /// Whether the table's sequence moves: only a forgetting step tells runs apart by their
        /// start, and a constant sequence keeps the other scenarios' states few.
        var sequenceMoves: Bool { steps.contains { $0.freshOnly } }
    }

    /// How another process's run on lock 1 ended.
    enum Outcome: Hashable {
        /// Told to the session of that generation, which held the key's watch.
        case published(toldTo: Int?)
        case abandoned
        case died
    }

    /// A notification committed for this session, not yet heard, and the run it is about.
    struct Pending: Hashable {
        var message: ChannelMessage
        var run: Int?
    }

    struct Row: Hashable {
        var sequence: Int64
        var started: Int64
    }

    /// A step of this process, with its machine and what the storage does for it.
    struct Step: Hashable {
        var lock: Int64
        var machine: StepStateMachine
        var registration: Int?
        var arrived = false
        var shouldLook = false
        var wake: Wake?
        var request: Int?
        var asked = 0
        /// The generation of the session whose lock it holds, while it leads.
        var leads: Int?
        /// Its result is handed to the session: it holds the lock until the result is sent.
        var publishing = false
        var done = false
        /// The last run of another process that refused this step the lock, or that it heard give
        /// up, and whether it heard a result, or a release after one, since.
        var cause: Int?
        var heardResultSince = false
    }

    struct Announcing: Hashable {
        var run: Int
        var watched: Bool
    }

    /// The storages and the database, beside the machines.
    struct World: Hashable {
        var machine = Machine(settings: SessionMachineExplorationTests.settings)
        var now = Duration.zero
        var steps: [Step]
        var started = false
        /// The attempt to have a session in flight, and whether its connection closed already.
        var attempt: Int?
        var attemptClosed = false
        var endToldEarly = false
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
        /// session's advisory locks stack), and its watches.
        var held: [Int64: Int] = [:]
        var watches: [Int64: Int] = [:]
        /// Another process: the run that holds lock 1, the runs so far, and how each ended. A run
        /// whose leader released lock 1 to announce its result announces it a moment later, when
        /// its statement commits, and tells this session if it held the watch then.
        var otherRun: Int? = 1
        var announcing: Announcing?
        var runs = 1
        var outcomes: [Int: Outcome] = [:]
        /// Notifications committed for this session, not yet heard.
        var inbox: [Pending] = []
        /// The table's sequence, and the row of lock 1's last result elsewhere.
        var sequence: Int64 = 1
        var sequenceMoves = false
        var row: Row?
        var runStarts: [Int: Int64] = [1: 0]
        /// Each request's time of asking, until it is answered; the requests answered; the run of
        /// another process that refused each refused request.
        var askedAt: [Int: Duration] = [:]
        var answered: Set<Int> = []
        var refusedBy: [Int: Int] = [:]
        /// The last time a session was live, or `run()` started.
        var lastLive = Duration.zero
        /// Locks reported lost, by step and generation.
        var reportedLost: Set<[Int]> = []
    }

    // MARK: - Exploring

    private func explore(_ scenario: Scenario, name: String) {
        var first = World(
            steps: scenario.steps.map { Step(lock: $0.lock, machine: StepStateMachine(freshOnly: $0.freshOnly)) })
        first.sequenceMoves = scenario.sequenceMoves
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
            moves += stepMoves(world, index, scenario)
        }
        moves += sessionMoves(world, scenario)
        moves += otherProcessMoves(world, scenario)
        if world.started, world.now < scenario.horizon {
            moves.append(
                (
                    "a second passes",
                    { world, failures in
                        world.now += .seconds(1)
                        let ticked = world.machine.tick(now: world.now, noSession: .databaseUnavailable("no session"))
                        for (answerer, error) in ticked.answers {
                            Self.answer(&world, answerer, .failure(error), &failures)
                        }
                        for index in ticked.wake { world.steps[index].wake = .tick }
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
                        for index in stopped.wake { world.steps[index].wake = .lost }
                        if stopped.cancelAttempt, let generation = world.attempt {
                            world.attempt = nil
                            Self.end(&world, generation, &failures)
                        }
                    }
                ))
        }
        return moves
    }

    private func stepMoves(_ world: World, _ index: Int, _ scenario: Scenario) -> [(String, Move)] {
        var moves: [(String, Move)] = []
        let step = world.steps[index]
        if !step.arrived {
            moves.append(
                (
                    "step \(index) arrives for lock \(step.lock) and asks",
                    { world, failures in
                        world.steps[index].arrived = true
                        world.steps[index].registration = world.machine.register(step.lock, waker: index)
                        // Nothing is heard for it yet: its first look asks.
                        Self.ask(&world, index, first: true, &failures)
                    }
                ))
        }
        guard let registration = step.registration, !step.done, step.request == nil, step.leads == nil else {
            if let id = step.request { moves.append(giveUp(index, id)) }
            return moves
        }
        // A step looks when it arrives, when it woke, or after an answer that says to.
        guard step.shouldLook || step.wake != nil else { return moves }
        var looking = step.machine
        if let wake = step.wake { looking.woke(wake) }
        let look = looking.look(world.machine.news(step.lock, id: registration))
        if case .ask = look, step.asked >= scenario.asks { return moves }
        moves.append(
            (
                "step \(index)\(step.wake.map { " wakes (\($0)) and" } ?? "") looks: \(look)",
                { world, failures in
                    world.steps[index].machine = looking
                    world.steps[index].wake = nil
                    switch look {
                    case .take(let heard):
                        Self.take(&world, index, heard, &failures)
                    case .ask(let first):
                        Self.ask(&world, index, first: first, &failures)
                    case .wait:
                        world.steps[index].shouldLook = false
                    }
                }
            ))
        return moves
    }

    private static func ask(_ world: inout World, _ index: Int, first: Bool, _ failures: inout [String]) {
        let id = world.machine.reserveID()
        world.askedAt[id] = world.now
        world.steps[index].asked += 1
        world.steps[index].request = id
        world.steps[index].shouldLook = false
        let lock = world.steps[index].lock
        switch world.machine.request(id, lock: lock, key: "k\(index)", first: first, answerer: id, now: world.now) {
        case .queued:
            break
        case .refused(let answerer, let error):
            answer(&world, answerer, .failure(error), &failures)
        }
    }

    private func giveUp(_ index: Int, _ id: Int) -> (String, Move) {
        (
            "step \(index) gives up",
            { world, failures in
                guard let answerer = world.machine.giveUp(id) else {
                    return failures.append("step \(index)'s request vanished unanswered")
                }
                Self.answer(&world, answerer, .failure(.databaseUnavailable("cancelled")), &failures)
            }
        )
    }

    private func leaderMoves(_ world: World, _ index: Int) -> [(String, Move)] {
        let step = world.steps[index]
        guard let generation = step.leads, !step.publishing else { return [] }
        let lock = step.lock
        return [
            (
                "step \(index) publishes",
                { world, _ in
                    world.steps[index].publishing = true
                    // The machines read a publication's lock and generation only, and this test its
                    // key: the value is what a leader's `"v"` encodes to, not copied into `inline`,
                    // since the notifications here carry no value.
                    let publication = Publication(
                        lock: lock, key: "k\(index)", started: 1, generation: generation, value: Data(#""v""#.utf8),
                        failureKind: 0, failure: "", inline: "")
                    _ = world.machine.publish(publication)
                }
            ),
            (
                "step \(index) abandons",
                { world, _ in
                    world.steps[index].leads = nil
                    world.steps[index].done = true
                    _ = world.machine.unlock(lock, .abandoned, generation: generation)
                }
            ),
        ]
    }

    private func sessionMoves(_ world: World, _ scenario: Scenario) -> [(String, Move)] {
        var moves: [(String, Move)] = world.steps.indices.flatMap { leaderMoves(world, $0) }
        if world.started, world.reconnectDue, world.attempt == nil, world.serving == nil, !world.storageDone {
            moves.append(
                (
                    "the storage asks for a session",
                    { world, _ in
                        world.reconnectDue = false
                        switch world.machine.startConnecting(now: world.now) {
                        case .connect(let generation):
                            world.attempt = generation
                            world.attemptClosed = false
                            world.endToldEarly = false
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
                            // The close callback, registered now, reports a close that came first.
                            if world.attemptClosed, !world.endToldEarly {
                                world.closed = true
                                _ = Self.endReported(&world, generation, &failures)
                            }
                        case .leave:
                            world.storageDone = true
                        case .ended:
                            Self.end(&world, generation, &failures)
                        }
                    }
                ))
            if world.failedAttempts < scenario.refusals {
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
            if scenario.faults, world.losses < scenario.losses, !world.attemptClosed {
                moves.append(
                    (
                        "session \(generation) closes before it is ready",
                        { world, _ in
                            world.losses += 1
                            world.attemptClosed = true
                        }
                    ))
                // Item 4 of issue 44: the storage reports a close only once the machine knows the
                // session; the machine must still take an end told first, as the old order did.
                moves.append(
                    (
                        "session \(generation)'s end is told before it is ready",
                        { world, failures in
                            world.losses += 1
                            world.attemptClosed = true
                            world.endToldEarly = true
                            _ = Self.endReported(&world, generation, &failures)
                        }
                    ))
            }
        }
        guard let generation = world.serving else { return moves }
        if world.running == nil {
            moves.append(
                (
                    "the statement loop of \(generation) looks",
                    { world, failures in
                        let next = world.machine.nextStatement(generation, now: world.now)
                        switch next {
                        case .finish, .ask, .release: world.running = next
                        case .wait: break
                        case .leave:
                            world.serving = nil
                            world.held = [:]
                            world.watches = [:]
                            world.inbox = []
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
                            if case .finish(let finishes) = world.running {
                                Self.published(&world, finishes.map(\.publication), generation)
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
        if !world.inbox.isEmpty, !world.closed {
            moves.append(
                (
                    "session \(generation) hears \(world.inbox[0].message)",
                    { world, _ in
                        Self.hear(&world, world.inbox.removeFirst(), generation)
                    }
                ))
        }
        if world.losses < scenario.losses, !world.closed {
            moves.append(
                (
                    "session \(generation) closes (lost, or its watchdog)",
                    { world, failures in
                        world.losses += 1
                        world.closed = true
                        world.held = [:]
                        world.watches = [:]
                        world.inbox = []
                        // The close future's report; the loop learns it at its next statement.
                        _ = Self.endReported(&world, generation, &failures)
                        if world.running != nil {
                            world.running = nil
                            Self.end(&world, generation, &failures)
                        }
                    }
                ))
        }
        return moves
    }

    /// Another process's runs on lock 1: each publishes, gives up or dies; the next may follow.
    private func otherProcessMoves(_ world: World, _ scenario: Scenario) -> [(String, Move)] {
        var moves: [(String, Move)] = []
        if let announcing = world.announcing {
            let run = announcing.run
            moves.append(
                (
                    "run \(run)'s announcement commits",
                    { world, _ in
                        world.announcing = nil
                        world.outcomes[run] = .published(toldTo: announcing.watched ? world.serving : nil)
                        let row = Row(sequence: world.sequence, started: world.runStarts[run]!)
                        world.row = row
                        world.sequence += 1
                        if announcing.watched {
                            let message = ChannelMessage.result(
                                lock: 1, sequence: row.sequence, started: row.started, inline: nil)
                            world.inbox.append(Pending(message: message, run: run))
                        }
                    }
                ))
        }
        guard let run = world.otherRun else {
            guard world.runs < scenario.otherRuns, world.held[1] == nil else { return moves }
            moves.append(
                (
                    "another process runs lock 1's work again",
                    { world, _ in
                        world.runs += 1
                        world.otherRun = world.runs
                        world.runStarts[world.runs] = world.sequence
                        world.sequence += 1
                    }
                ))
            return moves
        }
        // A process that waits holds the watch: only it is told.
        let watched = (world.watches[1] ?? 0) > 0
        moves.append(
            (
                "another process's leader of run \(run) releases lock 1 to announce its result",
                { world, _ in
                    world.otherRun = nil
                    // Ended, told to nobody yet: a step that gets the lock now takes over.
                    world.outcomes[run] = .published(toldTo: nil)
                    world.announcing = Announcing(run: run, watched: watched)
                }
            ))
        guard scenario.faults else { return moves }
        moves.append(
            (
                "another process gives run \(run) up",
                { world, _ in
                    world.otherRun = nil
                    world.outcomes[run] = .abandoned
                    if watched { world.inbox.append(Pending(message: .released(lock: 1, published: false), run: run)) }
                }
            ))
        moves.append(
            (
                "another process's leader of run \(run) dies",
                { world, _ in
                    world.otherRun = nil
                    world.outcomes[run] = .died
                }
            ))
        return moves
    }

    // MARK: - The storages' part

    /// A step takes a result it heard: read from the table by its full key.
    private static func take(_ world: inout World, _ index: Int, _ heard: Heard, _ failures: inout [String]) {
        let step = world.steps[index]
        let after = step.machine.freshOnly ? step.machine.after : nil
        guard step.lock == 1, let row = world.row, row.sequence >= heard.sequence,
            after.map({ row.started > $0 }) ?? true
        else {
            world.machine.discardResult(step.lock, id: step.registration!)
            world.steps[index].machine.resultGone()
            return
        }
        world.steps[index].done = true
        unregister(&world, index)
    }

    private static func unregister(_ world: inout World, _ index: Int) {
        guard let registration = world.steps[index].registration else { return }
        world.steps[index].registration = nil
        _ = world.machine.unregister(world.steps[index].lock, id: registration)
    }

    private static func answer(
        _ world: inout World, _ id: Int, _ result: Result<LockAnswer, CoalescingPostgresError>,
        _ failures: inout [String]
    ) {
        if !world.answered.insert(id).inserted { failures.append("request \(id) was answered twice") }
        world.askedAt[id] = nil
        let refusedBy = world.refusedBy.removeValue(forKey: id)
        guard let index = world.steps.firstIndex(where: { $0.request == id }) else {
            return failures.append("request \(id) was answered, but no step waits for it")
        }
        world.steps[index].request = nil
        switch result {
        case .success(let answer):
            let step = world.steps[index]
            let news = world.machine.news(step.lock, id: step.registration!)
            if !answer.acquired, let run = refusedBy {
                world.steps[index].cause = run
                world.steps[index].heardResultSince = false
            }
            switch world.steps[index].machine.answered(answer, news: news) {
            case .lead(let tookOver):
                world.steps[index].leads = answer.generation
                checkLead(world, index, tookOver: tookOver, generation: answer.generation, &failures)
                unregister(&world, index)
            case .giveBack:
                _ = world.machine.unlock(step.lock, .published, generation: answer.generation)
                world.steps[index].shouldLook = true
            case .waiting, .look:
                world.steps[index].shouldLook = true
            }
        case .failure(.databaseUnavailable(let message))
        where !message.contains("no answer within") && !message.contains("shutting down") && message != "cancelled":
            // Guarantee 34: unavailable only when no session could be had within connectTimeout.
            if world.now - world.lastLive < settings.connectTimeout {
                failures.append(
                    "request \(id) was told the database is unavailable \(world.now - world.lastLive) after a live session"
                )
            }
            world.steps[index].done = true
            unregister(&world, index)
        case .failure:
            world.steps[index].done = true
            unregister(&world, index)
        }
    }

    /// Guarantees 28 and 30: a step that asks again leads only when no result it waits for was
    /// told to its session, and counts a take-over exactly when it found the lock held by another
    /// process's run, or heard one give up, and got the lock with no result heard since.
    private static func checkLead(
        _ world: World, _ index: Int, tookOver: Bool, generation: Int, _ failures: inout [String]
    ) {
        let step = world.steps[index]
        guard let run = step.cause, let outcome = world.outcomes[run] else {
            if tookOver { failures.append("step \(index) counted a take-over, though no run it waited for ended") }
            return
        }
        // A step that asked again heard, behind the barrier, every result told to its session.
        for (told, outcome) in world.outcomes where outcome == .published(toldTo: generation) && step.asked > 1 {
            let acceptable = !step.machine.freshOnly || world.runStarts[told]! > (step.machine.after ?? .max)
            if acceptable {
                failures.append(
                    "step \(index) ran the work again, though run \(told)'s result was told to its session")
            }
        }
        let expected = !step.heardResultSince
        if tookOver != expected {
            failures.append(
                "step \(index) counted tookOver \(tookOver) after run \(run) ended \(outcome), expected \(expected)")
        }
    }

    private static func answerStatement(
        _ world: inout World, _ generation: Int, _ running: Machine.Next, _ failures: inout [String]
    ) {
        world.running = nil
        let reply: Machine.Reply
        switch running {
        case .ask(let asked):
            var grants: [Machine.Grant] = []
            for request in asked {
                if request.watch { world.watches[request.lock, default: 0] += 1 }
                let granted = request.lock != 1 || world.otherRun == nil
                if granted { world.held[request.lock, default: 0] += 1 }
                if !granted, let run = world.otherRun { world.refusedBy[request.id] = run }
                grants.append(Machine.Grant(lock: granted ? .granted : .held, sequence: world.sequence))
                if world.sequenceMoves { world.sequence += 1 }
            }
            reply = .asked(grants)
        case .release(let unlocks):
            // The barrier: what was committed before the release statement is heard before its answer.
            for pending in world.inbox { hear(&world, pending, generation) }
            world.inbox = []
            for unlock in unlocks {
                if unlock.release != nil { release(&world.held, unlock.lock) }
                if unlock.unwatch { release(&world.watches, unlock.lock) }
            }
            reply = .released
        case .finish(let finishes):
            for finish in finishes {
                // No other process waits here: only a step of this one makes a result told.
                if finish.mustTell {
                    let message = ChannelMessage.result(
                        lock: finish.publication.lock, sequence: finish.publication.started,
                        started: finish.publication.started, inline: nil)
                    world.inbox.append(Pending(message: message, run: nil))
                }
                if finish.holdsLock { release(&world.held, finish.publication.lock) }
                if finish.unwatch { release(&world.watches, finish.publication.lock) }
            }
            published(&world, finishes.map(\.publication), generation)
            reply = .finished
        case .wait, .leave, .lost:
            return
        }
        let answered = world.machine.answered(generation, reply, now: world.now)
        for (answerer, result) in answered.answers { answer(&world, answerer, result, &failures) }
    }

    /// The session hears a notification: what its steps learn of another process's run.
    private static func hear(_ world: inout World, _ pending: Pending, _ generation: Int) {
        for index in world.machine.heard(pending.message, generation: generation) {
            world.steps[index].wake = .news
            // A result of this process is another key's, whose lock collides: not the step's.
            switch pending.message {
            case .result, .released(_, published: true):
                if pending.run != nil { world.steps[index].heardResultSince = true }
            case .released(_, published: false):
                world.steps[index].cause = pending.run
                world.steps[index].heardResultSince = false
            case .other:
                break
            }
        }
    }

    private static func release(_ holds: inout [Int64: Int], _ lock: Int64) {
        holds[lock]? -= 1
        if holds[lock] == 0 { holds[lock] = nil }
    }

    /// Results sent (or refused): their steps no longer lead.
    private static func published(_ world: inout World, _ publications: [Publication], _ generation: Int) {
        for publication in publications where publication.generation == generation {
            guard let index = Int(publication.key.dropFirst()), world.steps[index].publishing else { continue }
            world.steps[index].leads = nil
            world.steps[index].publishing = false
            world.steps[index].done = true
        }
    }

    /// The statement loop's end of a session, or a failed attempt: what the storage does next.
    private static func end(_ world: inout World, _ generation: Int, _ failures: inout [String]) {
        if world.serving == generation {
            world.serving = nil
            world.held = [:]
            world.watches = [:]
            world.inbox = []
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
        for index in ended.wake { world.steps[index].wake = .lost }
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
            world.steps[index].done = true
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
        guard let live = world.machine.live, live.generation == world.serving, !world.closed else { return }
        for (lock, key) in live.leaders where world.held[lock] == nil {
            failures.append("the machine counts \(key) leading lock \(lock), which the session does not hold")
        }
        // No lock outlives the request that took it: each lock the session holds is led by a step,
        // waits for the barrier with its grant, or is on its way out (a leaked lock would block its
        // key in every process for the session's life).
        var accounted = Set(live.leaders.keys)
        accounted.formUnion(live.unlocks.filter { $0.release != nil }.map(\.lock))
        switch live.statement {
        case .granted(let asked, let grants), .releasing(let asked, let grants, _):
            accounted.formUnion(zip(asked, grants).filter { $0.1.lock == .granted }.map(\.0.lock))
        case .none, .finishing, .asking:
            break
        }
        if case .release(let unlocks) = world.running {
            accounted.formUnion(unlocks.filter { $0.release != nil }.map(\.lock))
        }
        for lock in world.held.keys where !accounted.contains(lock) {
            failures.append("the session holds lock \(lock), which no step leads and no release frees")
        }
        // A watch is taken once: the machine knows the session holds it.
        for (lock, count) in world.watches where count > 1 {
            failures.append("the session holds lock \(lock)'s watch \(count) times")
        }
    }

    /// Where nothing more can happen: every request answered, a stopped coalescer stopped, and no
    /// lock or watch held that no step needs (a leaked lock would block its key for the session's life).
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
        if world.serving != nil, !world.closed {
            for lock in world.held.keys where !world.steps.contains(where: { $0.lock == lock && $0.leads != nil }) {
                failures.append("the session holds lock \(lock), which no step leads")
            }
            // A watch no step needs goes with the session's next release statement, the keep-alive
            // at the latest: it is queued.
            let unwatching = Set(world.machine.live?.unlocks.filter(\.unwatch).map(\.lock) ?? [])
            for lock in world.watches.keys
            where !world.steps.contains(where: { $0.lock == lock && ($0.registration != nil || $0.leads != nil) })
                && !unwatching.contains(lock)
            {
                failures.append("the session holds lock \(lock)'s watch, which no step needs nor is queued to let go")
            }
        }
        if !failures.isEmpty {
            XCTFail(failures.joined(separator: "; ") + "\n" + trace.joined(separator: "\n"))
        }
    }
}
#endif
