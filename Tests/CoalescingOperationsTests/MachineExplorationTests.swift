import Foundation
import TestSupport
import XCTest

@testable import CoalescingOperations

/// Guarantees 2, 3, 5, 6, 7, 13, 15, 16, 17, 18, 19, 21, 22, 23, 24, 25 and 26, checked on the
/// engine's state machine alone: every order of the events of small scenarios, explored
/// exhaustively, with the guarantees as invariants after every step.
///
/// The test plays the storage's part: it sends the machine one event at a time and carries the
/// actions out itself, recording every call each caller receives. A delivery of progress starts
/// and finishes as events of their own, so calls can overlap with everything else; so do, where a
/// scenario asks for them, the threads that write a work's priority, the threads that deliver the
/// observer's events (with the settles queued behind them), and time: the clock moving on, stored
/// values expiring, the stall threshold passing. Since a state's future depends on nothing else, a
/// state seen before is not explored again; the test prints how many distinct states it saw. A
/// broken invariant fails with the events that led to it, one per line.
///
/// It runs in the plain `swift test` run only: it starts no thread, so the sanitizer's run learns
/// nothing from it, and it would take that run many times as long.
final class MachineExplorationTests: XCTestCase {
    func testEveryInterleavingOfOneOrTwoCallersKeepsEveryGuarantee() {
        // Every caller alone, and every pair: each a handler, a task or a joined operation, asking
        // for progress or not, staying, withdrawing or timing out. The work reports at any point
        // (a report after the end is ignored, so this covers none too), then succeeds, or fails for
        // every other plan. Two reports are explored with a single caller.
        let scenarios = CallerPlan.upToTwo.enumerated().map { index, plans in
            Scenario(
                plans: plans, reports: plans.count == 1 ? 2 : 1, fails: index % 2 == 1, control: nil, policy: .cancel)
        }
        explore(scenarios, name: "one or two callers")
    }

    func testEveryInterleavingWithEachControlAndPolicyKeepsEveryGuarantee() {
        // Each of cancel(key:), forget and cancelAll used at any point, or the policy that lets
        // abandoned work run on: every caller alone, and pairs of callers of different kinds, one
        // asking for progress, the first staying, the second staying or withdrawing.
        let pairs = CallerPlan.upToTwo.filter { plans in
            plans.count == 1
                || (plans[0].kind != plans[1].kind && plans[0].progress != plans[1].progress
                    && plans[0].leaving == .stays && plans[1].leaving != .timesOut)
        }
        let scenarios = pairs.flatMap { plans -> [Scenario] in
            let controlled = Control.allCases.map {
                Scenario(plans: plans, reports: 1, fails: false, control: $0, policy: .cancel)
            }
            return controlled + [
                Scenario(plans: plans, reports: 1, fails: false, control: nil, policy: .runToCompletion)
            ]
        }
        explore(scenarios, name: "controls and policies")
    }

    func testEveryInterleavingOfAHandlerATaskAndAJoinedOperationKeepsEveryGuarantee() {
        // Three callers, one of each kind: the task asks for progress and withdraws, the joined
        // operation raises its urgency (and may be finished by hand); the others stay or leave.
        let scenarios = [(Leaving.stays, Leaving.withdraws), (.timesOut, .stays), (.withdraws, .withdraws)].map {
            handler, rider in
            Scenario(
                plans: [
                    CallerPlan(kind: .handler, progress: false, leaving: handler, raises: false),
                    CallerPlan(kind: .task, progress: true, leaving: .withdraws, raises: false),
                    CallerPlan(kind: .joinedOperation, progress: false, leaving: rider, raises: true),
                ], reports: 1, fails: false, control: nil, policy: .cancel)
        }
        explore(scenarios, name: "a handler, a task and a joined operation")
    }

    /// Guarantees 2, 7, 13, 15, 16, 17, 18, 19, 21, 22 and 23, for a prefetchable coalescer:
    /// prefetchers and consumers arrive while time moves on. A prefetch that ends with no consumer
    /// waiting stores its value, indexed; a consumer takes it at most once, and only before it
    /// expires; one that arrives after the expiry starts new work; a prefetcher that finds a fresh
    /// value does nothing. The statistics count every arrival and departure in its step, the work
    /// only rises in priority, and the stall threshold passes at any point.
    func testEveryInterleavingOfPrefetchersConsumersAndTimeKeepsEveryGuarantee() {
        // Prefetchers and consumers, staying or leaving; time moves on twice, by half the prefetch
        // timeout, so that a value stored at the start expires at the end; the expiry timer fires
        // whenever a stored value is due; each work stalls at any point.
        let prefetcher = CallerPlan(kind: .prefetcher, progress: false, leaving: .stays, raises: false)
        let leavingPrefetcher = CallerPlan(kind: .prefetcher, progress: false, leaving: .withdraws, raises: false)
        let consumer = CallerPlan(kind: .consumer, progress: false, leaving: .stays, raises: false)
        let leavingConsumer = CallerPlan(kind: .consumer, progress: false, leaving: .timesOut, raises: false)
        let cases: [([CallerPlan], AbandonedWorkPolicy, Control?)] = [
            ([prefetcher, consumer, consumer], .cancel, nil),
            ([prefetcher, prefetcher, consumer], .cancel, nil),
            ([leavingConsumer, prefetcher, consumer], .cancel, nil),
            ([leavingPrefetcher, consumer], .runToCompletion, nil),
            ([leavingPrefetcher, leavingConsumer], .cancel, nil),
        ]
        let controlled = Control.allCases.map { ([prefetcher, consumer], AbandonedWorkPolicy.cancel, $0) }
        let scenarios = (cases + controlled).map { plans, policy, control in
            var scenario = Scenario(plans: plans, reports: 0, fails: false, control: control, policy: policy)
            (scenario.ticks, scenario.stalls) = (2, true)
            return scenario
        }
        explore(scenarios, name: "prefetchers, consumers and time")
    }

    /// Guarantees 6, 19 and 22, for the threads that write an operation's priority: interleaved
    /// with joins, withdrawals, raises, the app setting the operation's own priority (the floor)
    /// and the operation's start. At most one thread holds the right to write; every write is
    /// what the waiting callers and the floor ask at that moment, and is recorded as an event;
    /// once the operation starts, or the result is decided, nothing is written; when nobody is
    /// writing, the operation's priority is what its callers and the floor ask; the start waits
    /// for the write on its way, and is skipped once the result was decided.
    func testEveryInterleavingOfPriorityWritesAndTheStartKeepsEveryGuarantee() {
        // Pairs of callers that raise their urgency, withdraw or time out, with the app setting the
        // floor twice (up in one knob, then down in the other), a writer for every change, and the
        // operation starting at any point. (Each caller's kind changes nothing here but how it
        // leaves, which the other tests cover: three callers, or another kind, took minutes.)
        let raiser = CallerPlan(kind: .handler, progress: false, leaving: .stays, raises: true)
        let leaving = CallerPlan(kind: .handler, progress: false, leaving: .withdraws, raises: false)
        let timingOut = CallerPlan(kind: .handler, progress: false, leaving: .timesOut, raises: false)
        let cases = [[raiser, leaving], [timingOut, raiser], [leaving, timingOut]]
        let scenarios = cases.map { plans in
            var scenario = Scenario(plans: plans, reports: 0, fails: false, control: nil, policy: .cancel)
            scenario.writes = true
            return scenario
        }
        explore(scenarios, name: "priority writes and the start")
    }

    /// Guarantees 2, 5, 16 and 19, for an operation's admission: a caller comes with work 0's
    /// operation, which runs that work already, while the first caller raises its urgency and
    /// withdraws, writers write and the operation starts at any point, with the key forgotten at
    /// any point or not. It joins work 0 while its result is open, asking only for what it
    /// brought, and is turned away once the result is decided; when the first caller leaves, the
    /// work's priority falls to what the app set and what the second brought.
    func testEveryInterleavingOfAnAdmissionBesideTheRunningOperationKeepsEveryGuarantee() {
        let first = CallerPlan(kind: .handler, progress: false, leaving: .withdraws, raises: true)
        let beside = CallerPlan(kind: .besideRunner, progress: false, leaving: .stays, raises: false)
        let scenarios = [nil, Control.forget].map { control in
            var scenario = Scenario(
                plans: [first, beside], reports: 0, fails: false, control: control, policy: .cancel)
            scenario.writes = true
            return scenario
        }
        explore(scenarios, name: "an admission beside the running operation")
    }

    /// Guarantees 2, 3, 6, 15, 16, 21, 22 and 23, for the observer's deliveries: a thread offers to
    /// deliver the events after every step that records any, each work's end offers with its
    /// settle, which waits behind a delivery in progress, and the delivering thread hands over one
    /// batch at a time. One thread delivers at a time; the observer receives every event once, in
    /// the order recorded; a work's end is delivered before its callers are served and before any
    /// of them hears; a stall is reported only while the work runs with callers waiting.
    func testEveryInterleavingOfEventDeliveriesKeepsEveryGuarantee() {
        // Pairs of callers, one leaving; the policy that lets abandoned work run on, a prefetch and
        // its consumer, each work stalling at any point; or cancelAll or forget used at any point.
        let handler = CallerPlan(kind: .handler, progress: false, leaving: .stays, raises: false)
        let leaving = CallerPlan(kind: .handler, progress: false, leaving: .withdraws, raises: false)
        let timingOut = CallerPlan(kind: .handler, progress: false, leaving: .timesOut, raises: false)
        let task = CallerPlan(kind: .task, progress: false, leaving: .withdraws, raises: false)
        let cases: [([CallerPlan], AbandonedWorkPolicy, Control?)] = [
            ([handler, task], .cancel, nil),
            ([leaving, handler], .runToCompletion, nil),
            ([handler, timingOut], .cancel, .cancelAll),
            ([handler, leaving], .cancel, .forget),
            (
                [
                    CallerPlan(kind: .prefetcher, progress: false, leaving: .withdraws, raises: false),
                    CallerPlan(kind: .consumer, progress: false, leaving: .stays, raises: false),
                ], .runToCompletion, nil
            ),
        ]
        let scenarios = cases.map { plans, policy, control in
            var scenario = Scenario(plans: plans, reports: 0, fails: false, control: control, policy: policy)
            (scenario.delivers, scenario.stalls) = (true, control == nil)
            return scenario
        }
        explore(scenarios, name: "event deliveries")
    }

    private func explore(_ scenarios: [Scenario], name: String) {
        // A field the hash leaves out would merge states that differ, and skip their futures.
        let state = WorkState<Int>(runner: .unstarted, priority: PriorityState(floor: World.floor, risesOnly: false))
        XCTAssertEqual(World.unhashedFields(of: state), [], "fields of a work's state that the explorer does not hash")
        let machine = Machine<String>(observed: true, prefetchTimeout: nil)
        XCTAssertEqual(World.unhashedFields(of: machine), [], "fields of the machine that the explorer does not hash")
        var explorer = Explorer()
        let start = ContinuousClock.now
        for scenario in scenarios {
            if let failure = explorer.explore(scenario) {
                return XCTFail("\(name): \(failure)")
            }
        }
        print(
            "MachineExplorationTests, \(name): \(scenarios.count) scenarios, \(explorer.distinct) distinct states, "
                + "\(explorer.steps) steps, \(ContinuousClock.now - start)")
        XCTAssertGreaterThan(explorer.distinct, 1_000)
    }
}

// MARK: - Scenarios

/// A caller: one of an operation manager's, or a prefetchable task coalescer's task in its role.
private enum Kind {
    case handler, task, joinedOperation, prefetcher, consumer
    /// A handler that comes with work 0's operation, which already runs that work, asking for what
    /// it brought (`value(of:)` of that operation): admitted beside it, after a `forget` too.
    case besideRunner

    /// Whether it is a task: it parks its continuation.
    var isTask: Bool {
        switch self {
        case .task, .prefetcher, .consumer: true
        case .handler, .joinedOperation, .besideRunner: false
        }
    }
}

/// How a caller leaves before the result, if it does. A joined operation can also be finished by
/// hand, at any time, as an event of its own.
private enum Leaving: CaseIterable { case stays, withdraws, timesOut }

private enum Control: CaseIterable { case cancelKey, forget, cancelAll }

private struct CallerPlan: CustomStringConvertible {
    let kind: Kind
    let progress: Bool
    let leaving: Leaving
    /// Whether it asks for more urgency once, at any time (its handle's `setPriority`).
    let raises: Bool

    var description: String {
        "\(kind)\(progress ? " asking for progress" : ""), \(leaving)\(raises ? ", raising its urgency" : "")"
    }

    /// Every plan for one caller of an operation manager, alone or followed by a second.
    static let upToTwo: [[CallerPlan]] = {
        let one = [Kind.handler, .task, .joinedOperation].flatMap { kind in
            [false, true].flatMap { progress in
                Leaving.allCases.map { CallerPlan(kind: kind, progress: progress, leaving: $0, raises: $0 == .stays) }
            }
        }
        return one.map { [$0] } + one.flatMap { first in one.map { [first, $0] } }
    }()
}

private struct Scenario: CustomStringConvertible {
    var plans: [CallerPlan]
    /// How many times the work reports progress.
    var reports: Int
    var fails: Bool
    var control: Control?
    var policy: AbandonedWorkPolicy
    /// How many times the clock moves on, by half the prefetch timeout.
    var ticks = 0
    /// Whether each change that asks for a write sends a writer, the operation starts at any point,
    /// and the app sets the operation's own priority twice.
    var writes = false
    /// Whether threads deliver the events, and the settles queued behind them, as steps of their
    /// own; otherwise each step's events are delivered at its end.
    var delivers = false
    /// Whether the stall threshold passes, once per work, at any point.
    var stalls = false

    /// Whether the callers are a prefetchable task coalescer's: the machine then stores values.
    var prefetches: Bool { plans.contains { $0.kind == .prefetcher || $0.kind == .consumer } }

    var description: String {
        "callers \(plans.map(\.description).joined(separator: "; ")), reports \(reports), "
            + "control \(control.map { "\($0)" } ?? "none"), policy \(policy)"
            + (ticks > 0 ? ", \(ticks) ticks" : "") + (writes ? ", writers" : "")
            + (delivers ? ", deliveries" : "") + (stalls ? ", stalls" : "")
    }
}

private enum Event: Hashable, CustomStringConvertible {
    case arrive(Int), park(Int), leave(Int), finishByHand(Int), raise(Int)
    case report, finish(work: Int), control, settle(work: Int), call(Int)
    case tick, expire, stall(work: Int)
    case claim(work: Int), write(work: Int), begin(work: Int), setFloor
    case offer(settling: Int?), deliver

    /// Whether it happens once at most: its enabling reads the events used.
    var once: Bool {
        switch self {
        case .finishByHand, .finish, .control, .stall, .begin: true
        case .arrive, .park, .leave, .raise, .report, .settle, .call, .tick, .expire, .claim, .write, .setFloor,
            .offer, .deliver:
            false
        }
    }

    var description: String {
        switch self {
        case .arrive(let i): "caller \(i) arrives"
        case .park(let i): "caller \(i), a task, parks"
        case .leave(let i): "caller \(i) leaves"
        case .finishByHand(let i): "caller \(i)'s joined operation is finished by hand"
        case .raise(let i): "caller \(i) asks for more urgency"
        case .report: "the work reports progress"
        case .finish(let work): "work \(work) finishes"
        case .control: "the control is used"
        case .settle(let work): "work \(work)'s end is carried out: its callers are served"
        case .call(let i): "the call on its way to caller \(i) returns"
        case .tick: "the clock moves on by half the prefetch timeout"
        case .expire: "the expiry timer fires: expired values are released"
        case .stall(let work): "the stall threshold passes for work \(work)"
        case .claim(let work): "a thread offers to write work \(work)'s priority"
        case .write(let work): "the thread writing work \(work)'s priority asks what to write next"
        case .begin(let work): "work \(work)'s operation starts"
        case .setFloor: "the app sets the priority of work 0's operation"
        case .offer(let work):
            "a thread offers to deliver the events" + (work.map { ", then to settle work \($0)" } ?? "")
        case .deliver: "the delivering thread hands its batch over, then takes the next or stops"
        }
    }
}

// MARK: - The explorer

private struct WorkError: Error, Equatable {}

/// What the test knows of one caller.
private struct CallerRecord {
    var arrived = false
    /// The work it waits for in a slot, if it has one.
    var work: Int?
    var slot = 0
    /// A consumer that took this work's stored value as it arrived.
    var took: Int?
    /// A prefetcher that found a fresh value stored, and did nothing.
    var foundStored = false
    /// A caller beside an operation whose work was decided: turned away as it arrived.
    var turnedAway = false
    var parked = false
    var left = false
    /// Its withdrawal took effect: it must hear its own error, and no progress after it.
    var withdrew: Result<Int, Error>?
    var raised = false
    var progressCalls = 0
    var lastCalls = 0
    var inCall = false
    var delivering = false
}

/// The thread delivering the events: what is left of its batch, and the work it settles after its
/// first batch, if it offered with one.
private struct Deliverer {
    var batch: [Outbox<String>.Item]
    var settles: Int?
}

/// Where handlers post what they were called with, and settles that they ran: one thread
/// explores, one world at a time.
private final class Mail: Sendable {
    let calls = LockedBox<[(caller: Int, result: Result<Int, Error>)]>([])
    let settles = LockedBox<[Int]>([])
}

/// One run of a scenario along one order of events, rebuilt from the start for each order.
private final class World {
    let scenario: Scenario
    var machine: Machine<String>
    var works: [Work<String, Int>] = []
    var settled: [Bool] = []
    /// Whether each work's result was decided.
    var decided: [Bool] = []
    var callers: [CallerRecord]
    var used: Set<Event> = []
    var reportsMade = 0
    var pending: [(work: Int, result: Result<Int, Error>)] = []
    var expectedIndexed: Int?
    var forgot = false
    var workEvents = (started: 0, ended: 0)
    /// The works whose end the observer has heard of.
    var endDelivered: Set<Int> = []
    /// The clock, in seconds.
    var now = 0
    /// The value stored for a consumer, by the work that stored it, until its expiry.
    var stored: (work: Int, expiry: Int)?
    /// How many times the app set work 0's own priority.
    var floorsSet = 0
    /// Threads told to write a work's priority that have not offered yet: the work of each, sorted.
    var writersDue: [Int] = []
    /// The group of the thread holding the right to write each work's priority, as the machine
    /// made it when it granted the claim.
    var holders: [Int: DispatchGroup] = [:]
    /// What was last written to each work's operation.
    var written: [Urgency] = []
    /// Threads about to offer to deliver the events: the work each settles after them, or -1; sorted.
    var offers: [Int] = []
    var deliverer: Deliverer?
    /// What was recorded and not yet delivered, in order.
    var undelivered: [Outbox<String>.Item] = []
    /// How many of the outbox's items are in ``undelivered``.
    var pendingKnown = 0
    var failure: String?
    let mail: Mail
    /// The statistics before the step under way, and the outcomes it decided: the outcomes are
    /// counted by their change, so that states that differ only in past outcomes are one.
    var stepStart = CoalescingStatistics()
    var stepEnds: [WorkOutcome] = []

    init(_ scenario: Scenario, mail: Mail) {
        self.scenario = scenario
        self.mail = mail
        machine = Machine(observed: true, prefetchTimeout: scenario.prefetches ? .seconds(Self.prefetchTimeout) : nil)
        callers = scenario.plans.map { _ in CallerRecord() }
    }

    static let floor = Urgency(OperationPriority())
    /// Work 0's floor after the app set its operation's priority: up in one knob, then down in the other.
    static let floors = [
        floor, Urgency(OperationPriority(qualityOfService: .userInitiated)),
        Urgency(OperationPriority(queuePriority: .veryLow, qualityOfService: .userInitiated)),
    ]
    static let prefetchTimeout = 10
    static let stallThreshold = Duration.seconds(30)

    func urgency(of caller: Int) -> Urgency {
        let levels: [Operation.QueuePriority] = [.low, .high, .veryHigh]
        let raised: Operation.QueuePriority = callers[caller].raised ? .veryHigh : levels[caller]
        return Urgency(OperationPriority(queuePriority: raised, qualityOfService: caller == 2 ? .utility : .default))
    }

    func taskPriority(of caller: Int) -> TaskPriority { [.low, .high, .medium][caller] }

    func floor(of work: Int) -> Urgency { work == 0 ? Self.floors[floorsSet] : Self.floor }

    /// What work `work`'s priority must be (Guarantee 19): what its waiting callers and its floor
    /// ask; for a task's work, what every caller that arrived brought, since it only rises.
    func target(of work: Int) -> Urgency {
        let arrivals = callers.indices.filter { callers[$0].work == work }
        guard !scenario.prefetches else {
            return arrivals.map { Urgency(taskPriority(of: $0)) }.reduce(Urgency(taskPriority(of: arrivals[0]))) {
                $0.raised(to: $1)
            }
        }
        return arrivals.filter { callers[$0].withdrew == nil }.reduce(floor(of: work)) {
            $0.raised(to: urgency(of: $1))
        }
    }

    func isDecided(_ work: Int) -> Bool { decided[work] }

    func hasStarted(_ work: Int) -> Bool { used.contains(.begin(work: work)) }

    /// A stand-in for a task's continuation, which the machine stores and hands back but never
    /// resumes: the caller's number, in the continuation's one word.
    func continuation(of caller: Int) -> UnsafeContinuation<Int, Error> {
        unsafeBitCast(UnsafeRawPointer(bitPattern: 0x1000 + caller)!, to: UnsafeContinuation<Int, Error>.self)
    }

    func caller(_ i: Int) -> Caller<Int> {
        switch scenario.plans[i].kind {
        case .handler, .besideRunner:
            return .handler({ [mail] result in mail.calls.mutate { $0.append((i, result)) } }, queue: nil)
        case .task, .prefetcher: return .arriving(consumes: false)
        case .consumer: return .arriving(consumes: true)
        case .joinedOperation:
            let operation = CoalescibleOperation<Int>(identifier: "k") { [mail] result in
                mail.calls.mutate { $0.append((i, result)) }
            }
            return .operation(operation)
        }
    }

    // MARK: Events

    /// The events that can happen next, as of the end of the last step.
    private(set) var enabled: [Event] = []

    private var events: [Event] {
        var events: [Event] = []
        for (i, record) in callers.enumerated() {
            let plan = scenario.plans[i]
            guard record.arrived else {
                if i == 0 || callers[i - 1].arrived { events.append(.arrive(i)) }
                continue
            }
            guard record.work != nil else { continue }
            if plan.kind.isTask, !record.parked { events.append(.park(i)) }
            if plan.leaving != .stays, !record.left { events.append(.leave(i)) }
            if plan.kind == .joinedOperation, !used.contains(.finishByHand(i)) { events.append(.finishByHand(i)) }
            if plan.raises, !record.raised { events.append(.raise(i)) }
            if record.delivering { events.append(.call(i)) }
        }
        if reportsMade < scenario.reports { events.append(.report) }
        events += works.indices.filter { !used.contains(.finish(work: $0)) }.map { .finish(work: $0) }
        if scenario.control != nil, !used.contains(.control) { events.append(.control) }
        if !scenario.delivers { events += pending.map { .settle(work: $0.work) } }
        if now < scenario.ticks * Self.prefetchTimeout / 2 { events.append(.tick) }
        // Only when due: before, the timer's firing changes nothing.
        if let next = machine.nextExpiry, next <= .seconds(now) { events.append(.expire) }
        if scenario.stalls {
            events += works.indices.filter { !used.contains(.stall(work: $0)) }.map { .stall(work: $0) }
        }
        if scenario.writes {
            events += works.indices.filter { !hasStarted($0) }.map { .begin(work: $0) }
            if floorsSet < Self.floors.count - 1 { events.append(.setFloor) }
            events += Set(writersDue).sorted().map { .claim(work: $0) }
            events += holders.keys.sorted().map { .write(work: $0) }
        }
        if scenario.delivers {
            events += Set(offers).sorted().map { .offer(settling: $0 < 0 ? nil : $0) }
            if deliverer != nil { events.append(.deliver) }
        }
        return events
    }

    func perform(_ event: Event) {
        if event.once { used.insert(event) }
        (stepStart, stepEnds) = (machine.statistics, [])
        switch event {
        case .arrive(let i):
            callers[i].arrived = true
            if scenario.prefetches { arriveAsTask(i) } else { arrive(i) }
            deliverEvents()
        case .park(let i):
            callers[i].parked = true
            let record = callers[i]
            let parking = machine.park(works[record.work!], continuation(of: i), in: record.slot)
            if case .resumes(let result) = parking { last(i, result) }
        case .leave(let i):
            callers[i].left = true
            leave(i, reason: scenario.plans[i].leaving == .timesOut ? .timedOut : .withdrawn, hearing: nil)
        case .finishByHand(let i):
            leave(i, reason: .withdrawn, hearing: .success(99))
        case .raise(let i):
            callers[i].raised = true
            let record = callers[i]
            let reprioritization = machine.reprioritize(works[record.work!], slot: record.slot, to: urgency(of: i))
            if case .writes = reprioritization { sendWriter(record.work!) }
        case .report:
            reportsMade += 1
            let starting = machine.report(WorkProgress(completed: Int64(reportsMade), total: 2), for: works[0])
            for (slot, _) in starting {
                callers[caller(in: 0, slot: slot)].delivering = true
            }
        case .finish(let work):
            finish(work)
        case .control:
            control()
        case .settle(let work):
            settle(work)
        case .call(let i):
            callers[i].inCall = false
            let record = callers[i]
            switch machine.nextCall(works[record.work!], slot: record.slot) {
            case .progress:
                progress(i)
            case .last(let caller, let result):
                callers[i].delivering = false
                tell(caller, result, work: record.work!)
            case .none:
                callers[i].delivering = false
            }
        case .tick:
            now += Self.prefetchTimeout / 2
        case .expire:
            machine.releaseExpired(at: .seconds(now))
            if let value = stored, value.expiry <= now { (stored, expectedIndexed) = (nil, nil) }
        case .stall(let work):
            stall(work)
        case .claim(let work):
            claim(work)
        case .write(let work):
            write(work)
        case .begin(let work):
            begin(work)
        case .setFloor:
            floorsSet += 1
            let floorChange = machine.setFloor(of: works[0]) { priority in
                if floorsSet == 1 {
                    priority.qualityOfService = .userInitiated
                } else {
                    priority.queuePriority = .veryLow
                }
            }
            if works[0].state.priority.floor != Self.floors[floorsSet] {
                fail("work 0's floor is \(works[0].state.priority.floor), not what the app set (Guarantee 19)")
            }
            let writes = floorChange == .writes
            if writes == (hasStarted(0) || isDecided(0)) {
                fail("setting the floor of work 0 said writes \(writes) (Guarantee 19)")
            }
            if writes { sendWriter(0) }
        case .offer(let work):
            offer(settling: work)
        case .deliver:
            deliverNext()
        }
        checkInvariants()
    }

    /// An operation manager's caller arrives as its front-end brings it. By identifier, it joins
    /// the work in flight, or comes with a fresh operation, with no handler of its own, that starts
    /// new work; a joined operation is admitted itself, after such a fresh operation if nothing is
    /// in flight; a caller beside work 0's operation comes with that operation.
    private func arrive(_ i: Int) {
        let kind = scenario.plans[i].kind
        let sink = scenario.plans[i].progress ? ProgressSink(queue: nil) { _ in } : nil
        let newcomer = OperationQueueManager.Newcomer(
            caller(i), urgency: urgency(of: i), sink: sink, ownsOperation: kind == .besideRunner)
        if kind != .besideRunner, machine.inFlight("k", hash: "k".hashValue, as: Int.self) == nil {
            let starter = kind == .joinedOperation ? nil : newcomer
            admit(i, CoalescibleOperation<Int>(identifier: "k"), asking: Self.floor, then: starter)
            guard kind == .joinedOperation else { return }
        }
        switch kind {
        case .handler, .task:
            place(i, in: machine.join("k", caller(i), asking: urgency(of: i), watching: sink)!)
        case .joinedOperation:
            guard case .operation(let operation) = caller(i) else { preconditionFailure() }
            admit(i, operation, asking: urgency(of: i), watching: sink, then: nil)
        case .besideRunner:
            // Its getters say what was last written to it, not the app's floor (Guarantee 19).
            guard case .operation(let runner) = works[0].state.runner else { preconditionFailure() }
            admit(i, runner, asking: written[0], then: newcomer)
        case .prefetcher, .consumer:
            preconditionFailure("a task coalescer's caller arrived at an operation manager")
        }
    }

    /// Admits `operation`, fresh unless it runs work 0, asking for `urgency`, and `newcomer`
    /// beside it; the taking is what the operation's lock would find.
    private func admit(
        _ i: Int, _ operation: CoalescibleOperation<Int>, asking urgency: Urgency, watching sink: ProgressSink? = nil,
        then newcomer: OperationQueueManager.Newcomer<Int>?
    ) {
        let plan = machine.planAdmission("k", running: operation, floor: urgency, policy: scenario.policy, at: nil)
        var runsWorkZero = false
        if let first = works.first, case .operation(let runner) = first.state.runner {
            runsWorkZero = runner === operation
        }
        let taken: Taking<String, Int> =
            runsWorkZero ? .refused(works[0], runs: true) : plan.slot == nil ? .runs(own: nil) : .joins
        let statistics = machine.statistics
        switch machine.admit(operation, plan, taken: taken, asking: urgency, watching: sink, then: newcomer) {
        case .starts(let entry):
            if runsWorkZero { return fail("caller \(i) started work with the operation that runs work 0") }
            expectedIndexed = add(entry.work)
            if entry.slot != nil { place(i, in: entry) }
        case .joins(let entry):
            place(i, in: entry)
        case .turnsAway:
            guard runsWorkZero, isDecided(0) else {
                return fail("caller \(i) was turned away with work 0 \(isDecided(0) ? "decided" : "running")")
            }
            if machine.statistics != statistics { fail("turning caller \(i) away changed the statistics") }
            // The front-end tells it that its work was cancelled.
            (callers[i].turnedAway, callers[i].withdrew) = (true, .failure(CoalescingError.cancelled))
            last(i, .failure(CoalescingError.cancelled))
        }
    }

    /// Caller `i` is in `entry`'s work, where it started or joined it.
    private func place(_ i: Int, in entry: Entry<String, Int>) {
        let work = works.firstIndex { $0 === entry.work }!
        (callers[i].work, callers[i].slot) = (work, entry.slot!)
        if entry.delivers { callers[i].delivering = true }
        if entry.raised { sendWriter(work) }
    }

    private func add(_ work: Work<String, Int>) -> Int {
        works.append(work)
        settled.append(false)
        decided.append(false)
        written.append(work.state.priority.applied)
        return works.count - 1
    }

    /// A prefetchable coalescer's caller arrives at the clock's time: a consumer takes a fresh
    /// stored value, a prefetcher that finds one does nothing; otherwise it joins the work in
    /// flight or starts new work (Guarantee 15).
    private func arriveAsTask(_ i: Int) {
        let kind = scenario.plans[i].kind
        // The model first: a value that has expired is released as the caller arrives.
        if let value = stored, value.expiry <= now { (stored, expectedIndexed) = (nil, nil) }
        let fresh = stored
        let statistics = machine.statistics
        let recorded = machine.outbox!.pending.count
        let arrival: Arrival<String, Int> = machine.arrive(
            "k", as: kind == .consumer ? .consumer : .prefetcher, at: taskPriority(of: i),
            starting: taskPriority(of: i), policy: scenario.policy, watching: nil, at: .seconds(now))
        let found = fresh.map { "work \($0.work)'s value stored until \($0.expiry) s" } ?? "no fresh value stored"
        switch arrival {
        case .taken(let value):
            guard kind == .consumer, let fresh else {
                return fail("caller \(i), a \(kind), took a value at \(now) s with \(found) (Guarantee 15)")
            }
            if let taker = callers.firstIndex(where: { $0.took == fresh.work }) {
                fail("caller \(i) took work \(fresh.work)'s stored value, which caller \(taker) took (Guarantee 15)")
            }
            if value != 42 + fresh.work { fail("caller \(i) took \(value), not work \(fresh.work)'s value") }
            callers[i].took = fresh.work
            callers[i].lastCalls += 1
            (stored, expectedIndexed) = (nil, nil)
        case .alreadyStored:
            guard kind == .prefetcher, fresh != nil else {
                return fail(
                    "caller \(i), a \(kind), was told a value is stored at \(now) s with \(found) (Guarantee 15)")
            }
            callers[i].foundStored = true
            if machine.statistics != statistics || machine.outbox!.pending.count != recorded {
                fail("caller \(i), a prefetcher that found a value stored, changed the statistics or the events")
            }
        case .joins(let entry):
            guard fresh == nil, let expected = expectedIndexed, works[expected] === entry.work else {
                return fail(
                    "caller \(i) joined work \(entry.work.number - 1) at \(now) s with \(found) (Guarantees 7 and 15)")
            }
            (callers[i].work, callers[i].slot) = (expected, entry.slot!)
        case .starts(let entry):
            if fresh != nil || expectedIndexed != nil {
                fail(
                    "caller \(i) started new work at \(now) s with \(found), work \(expectedIndexed ?? -1) "
                        + "indexed (Guarantee 15)")
            }
            let index = add(entry.work)
            expectedIndexed = index
            (callers[i].work, callers[i].slot) = (index, entry.slot!)
        }
    }

    private func finish(_ work: Int) {
        let result: Result<Int, Error> = scenario.fails && work == 0 ? .failure(WorkError()) : .success(42 + work)
        // Stored only by a prefetch that ends with a value, still indexed, with no consumer waiting.
        let stores =
            scenario.prefetches && !isDecided(work) && expectedIndexed == work && scenario.fails == false
            && callers.indices.contains { callers[$0].work == work && scenario.plans[$0].kind == .prefetcher }
            && !callers.indices.contains {
                callers[$0].work == work && scenario.plans[$0].kind == .consumer && callers[$0].withdrew == nil
            }
        let wasDecided = isDecided(work)
        let decision = machine.decide(works[work], with: result, stopping: false, at: .seconds(now))
        var late = false
        if case .late = decision { late = true }
        if late != wasDecided { fail("work \(work)'s finish was \(wasDecided ? "taken" : "ignored")") }
        if case .ends(let decided) = decision { decide(work, decided, result, stores: stores) }
    }

    private func control() {
        let indexedRunning = expectedIndexed.flatMap { isDecided($0) ? nil : $0 }
        let hadStored = stored != nil
        switch scenario.control! {
        case .forget:
            let forgotten = machine.forget(where: { $0 == "k" })
            let found = forgotten.found
            if found != (expectedIndexed != nil) {
                fail("forget(key:) found \(found) with work \(expectedIndexed ?? -1) indexed (Guarantee 16)")
            }
            if forgotten.holds.count != (hadStored ? 1 : 0) {
                fail("forget(key:) waits for \(forgotten.holds.count) values, dropping \(hadStored) (Guarantee 15)")
            }
            if indexedRunning != nil { forgot = true }
            (expectedIndexed, stored) = (nil, nil)
        case .cancelKey, .cancelAll:
            let all = scenario.control == .cancelAll
            let forgotten = works.indices.filter { !isDecided($0) && $0 != expectedIndexed }
            let expected = Set((indexedRunning.map { [$0] } ?? []) + (all ? forgotten : []))
            let cancelled = machine.cancelAll(where: { $0 == "k" }, includingForgotten: all)
            let indices = cancelled.works.map { work in works.firstIndex { $0 === work }! }
            if Set(indices) != expected || indices.count != expected.count {
                fail("cancelling cancelled works \(indices) where \(expected.sorted()) were in flight (Guarantee 13)")
            }
            if cancelled.found != (!expected.isEmpty || hadStored) {
                fail("cancelling found \(cancelled.found) (Guarantees 13 and 15)")
            }
            if cancelled.holds.count != (hadStored ? 1 : 0) {
                fail("cancelling waits for \(cancelled.holds.count) values, having dropped \(hadStored) (Guarantee 15)")
            }
            if hadStored { (stored, expectedIndexed) = (nil, nil) }
            for index in indices {
                let result = Result<Int, Error>.failure(CoalescingError.cancelled)
                let decision = machine.decide(works[index], with: result, stopping: true, at: .seconds(now))
                guard case .ends(let decided) = decision else { return fail("cancelling work \(index) was late") }
                decide(index, decided, result)
            }
            deliverEvents()
        }
    }

    private func leave(_ i: Int, reason: WithdrawalReason, hearing: Result<Int, Error>?) {
        let record = callers[i]
        let work = works[record.work!]
        if case .running = work.state.phase, work.state.callers.entries[record.slot].caller.isOpen {
            callers[i].withdrew = hearing ?? .failure(reason.error)
        }
        switch machine.withdraw(work, slot: record.slot, reason: reason, hearing: hearing, at: .seconds(now)) {
        case .late:
            break
        case .left(let told, let reprioritizes):
            if let told { tell(told.caller, told.result, work: record.work!) }
            deliverEvents()
            if reprioritizes { sendWriter(record.work!) }
        case .abandoned(let decided, let told):
            let result = Result<Int, Error>.failure(CoalescingError.cancelled)
            if let told { tell(told.caller, told.result, work: record.work!) }
            decide(record.work!, decided, result)
        }
    }

    /// Carries a decided end out: its settle waits for the events (here, or behind a delivery).
    private func decide(_ work: Int, _ decided: Decided<Int>, _ result: Result<Int, Error>, stores: Bool = false) {
        self.decided[work] = true
        // Measured on the clock from its start, however it ended: abandoned too (Guarantee 22).
        let expected = works[work].startedAt.map { .seconds(now) - $0 } ?? .zero
        for case .event(.workEnded(_, work + 1, _, _, _, let duration)) in machine.outbox!.pending
        where duration != expected {
            fail(
                "work \(work) ended at \(now) s and reported a duration of \(duration), not \(expected) "
                    + "(Guarantee 22)")
        }
        stepEnds.append(WorkOutcome(result))
        pending.append((work, result))
        let storedIt = decided.storing != nil
        if storedIt != stores {
            fail("work \(work) \(storedIt ? "stored" : "did not store") its result \(result) (Guarantee 15)")
        }
        if storedIt {
            stored = (work, now + Self.prefetchTimeout)
        } else if expectedIndexed == work {
            expectedIndexed = nil
        }
        if scenario.delivers { insert(work, into: &offers) }
    }

    private func settle(_ work: Int) {
        guard let at = pending.firstIndex(where: { $0.work == work }) else {
            return fail("work \(work) was settled twice, or before its result was decided")
        }
        let result = pending.remove(at: at).result
        if !endDelivered.contains(work) {
            fail("work \(work)'s callers were served before the observer heard of its end (Guarantee 22)")
        }
        settled[work] = true
        let settled = machine.settle(works[work], with: result)
        for slot in settled.callers.entries {
            tell(slot.caller, result, work: work)
        }
        for owed in settled.held {
            tell(owed.caller, owed.result, work: work)
        }
    }

    private func caller(in work: Int, slot: Int) -> Int {
        callers.indices.first { callers[$0].work == work && callers[$0].slot == slot }!
    }

    /// Carries out one caller's last call, as the storage's delivery would.
    private func tell(_ caller: Caller<Int>, _ result: Result<Int, Error>, work: Int) {
        switch caller {
        case .handler(let handler, _):
            handler(result)
            deliverMail()
        case .operation(let operation):
            operation.completionHandler?(result)
            deliverMail()
        case .parked(let continuation, _):
            last(Int(bitPattern: unsafeBitCast(continuation, to: UnsafeRawPointer.self)) - 0x1000, result)
        case .arriving, .owed, .held, .gone: break
        }
    }

    // MARK: Time

    /// The stall threshold passes: reported, with its callers, only while the work runs with
    /// callers waiting (Guarantee 23).
    private func stall(_ work: Int) {
        let waiting = isDecided(work) ? 0 : callers.filter { $0.work == work && $0.withdrew == nil }.count
        let recorded = machine.outbox!.pending.count
        switch machine.stalled(works[work], after: Self.stallThreshold) {
        case .reported(let count):
            if waiting == 0 || count != waiting {
                fail("work \(work) was reported stalled with \(count) callers, \(waiting) wait (Guarantee 23)")
            }
            checkRecorded(
                since: recorded, .workStalled(key: "k", work: work + 1, callers: count, elapsed: Self.stallThreshold))
            deliverEvents()
        case .quiet:
            if waiting > 0 {
                fail("work \(work), in flight with \(waiting) callers waiting, was not reported stalled (Guarantee 23)")
            }
            checkRecorded(since: recorded, nil)
        }
    }

    /// The step recorded `event` and nothing else, or nothing if nil (Guarantee 22).
    private func checkRecorded(since count: Int, _ event: CoalescingEvent<String>?) {
        let items = Array(machine.outbox!.pending.dropFirst(count))
        if items.map(code) != (event.map { [Self.code($0)] } ?? []) {
            fail("the step recorded \(describe(items)), not \(event.map { "\($0)" } ?? "nothing") (Guarantee 22)")
        }
    }

    // MARK: The priority's writers

    /// A change asked for a write: a thread will offer to write (the storage's `applyPriority`).
    ///
    /// One thread due per work is enough: until it claims, it picks up every change after it.
    private func sendWriter(_ work: Int) {
        guard scenario.writes, !writersDue.contains(work) else { return }
        insert(work, into: &writersDue)
    }

    private func claim(_ work: Int) {
        writersDue.remove(at: writersDue.firstIndex(of: work)!)
        let free = holders[work] == nil && !isDecided(work) && !hasStarted(work)
        let writer = machine.claimWriting(works[work])
        let writes = writer != nil
        if writes, !free {
            let why = holders[work] != nil ? "another thread held it" : isDecided(work) ? "it ended" : "it started"
            fail("a thread was given the right to write work \(work)'s priority while \(why) (Guarantee 19)")
        }
        if let writer { holders[work] = writer }
        if !writes, free { fail("a thread was refused the right to write work \(work)'s priority, which nobody held") }
    }

    private func write(_ work: Int) {
        let recorded = machine.outbox!.pending.count
        switch machine.nextPriority(of: works[work]) {
        case .write(let urgency, let runner):
            if hasStarted(work) {
                fail("work \(work)'s priority was written after its operation started (Guarantee 19)")
            }
            if isDecided(work) { fail("work \(work)'s priority was written after its result was decided") }
            if urgency != target(of: work) {
                fail(
                    "work \(work) was written \(urgency) where its callers and floor ask \(target(of: work)) "
                        + "(Guarantee 19)")
            }
            if case .operation(let operation) = runner, case .operation(let own) = works[work].state.runner,
                operation === own
            {
            } else {
                fail("work \(work)'s priority was written to another runner")
            }
            written[work] = urgency
            checkRecorded(
                since: recorded,
                .priorityChanged(key: "k", work: work + 1, priority: .operation(urgency.operationPriority)))
        case .done:
            holders[work] = nil
            if !isDecided(work), !hasStarted(work), written[work] != target(of: work) {
                fail(
                    "the thread writing work \(work)'s priority let go at \(written[work]) where its callers and "
                        + "floor ask \(target(of: work)) (Guarantee 19)")
            }
            checkRecorded(since: recorded, nil)
            deliverEvents()
        }
    }

    /// The operation starts: it waits for the write on its way, and runs only if the result is open.
    private func begin(_ work: Int) {
        let holder = holders[work]
        let begun = machine.begin(works[work])
        if begun.runs, isDecided(work) {
            fail("work \(work)'s operation runs after its result was decided (Guarantee 6)")
        }
        if !begun.runs, !isDecided(work) { fail("work \(work)'s operation skips its work while it is in flight") }
        if begun.after !== holder {
            fail("work \(work)'s operation starts without waiting for the thread writing its priority (Guarantee 19)")
        }
    }

    // MARK: The observer's deliveries

    /// The storage delivers the events after this step: a thread offers to, if any wait. One such
    /// thread due is enough: until it offers, it delivers every event recorded after it too.
    private func deliverEvents() {
        guard scenario.delivers, !machine.outbox!.pending.isEmpty, !offers.contains(-1) else { return }
        insert(-1, into: &offers)
    }

    private func offer(settling work: Int?) {
        offers.remove(at: offers.firstIndex(of: work ?? -1)!)
        scanRecorded()
        var settle: (@Sendable () -> Void)?
        if let work {
            let mail = mail
            settle = { mail.settles.mutate { $0.append(work) } }
        }
        if let batch = machine.outbox!.startDelivering(then: settle) {
            if deliverer != nil { fail("two threads deliver the events at once (Guarantee 22)") }
            take(batch)
            deliverer = Deliverer(batch: batch, settles: work)
        } else if deliverer == nil {
            fail("a thread was turned away from delivering the events, and nobody delivers them (Guarantee 22)")
        }
    }

    /// The delivering thread hands its batch over, item by item: events to the observer, settles
    /// queued behind them run; then, after its first batch, its own settle; then it takes the next
    /// batch, or stops, all in one step: another thread's step among these is explored before or
    /// after it instead, since nothing the explorer checks tells those orders apart (a settle's
    /// callers hear in the settle, after the events before it in any order).
    private func deliverNext() {
        guard let delivering = deliverer else { return }
        deliverer = Deliverer(batch: [], settles: nil)
        for item in delivering.batch {
            if undelivered.first.map(code) != code(item) {
                fail(
                    "the observer was handed \(describe([item])) where \(describe(Array(undelivered.prefix(1)))) was "
                        + "recorded first (Guarantee 22)")
            }
            if !undelivered.isEmpty { undelivered.removeFirst() }
            switch item {
            case .event(let event):
                observe(event)
            case .settle(let settle):
                settle()
                for work in takeSettles() { self.settle(work) }
            }
        }
        if let work = delivering.settles { settle(work) }
        scanRecorded()
        if let batch = machine.outbox!.continueDelivering(reusing: []) {
            take(batch)
            deliverer!.batch = batch
        } else {
            deliverer = nil
            if !undelivered.isEmpty {
                fail("the delivery stopped with \(describe(undelivered)) not delivered (Guarantee 22)")
            }
        }
    }

    /// A batch taken from the outbox: everything recorded and not delivered, in order.
    private func take(_ batch: [Outbox<String>.Item]) {
        if batch.map(code) != undelivered.map(code) {
            fail("a batch of \(describe(batch)) was taken where \(describe(undelivered)) wait (Guarantee 22)")
        }
        if !machine.outbox!.pending.isEmpty { fail("a batch was taken and left items in the outbox") }
        pendingKnown = 0
    }

    /// Notes the items recorded since the last look.
    private func scanRecorded() {
        let pending = machine.outbox!.pending
        // Recorded items stay, in order, until a batch takes them all.
        if pending.count < pendingKnown
            || pending.prefix(pendingKnown).map(code) != undelivered.suffix(pendingKnown).map(code)
        {
            return fail("the outbox holds \(describe(pending)) after \(describe(undelivered)) (Guarantee 22)")
        }
        undelivered += pending.dropFirst(pendingKnown)
        pendingKnown = pending.count
    }

    private func takeSettles() -> [Int] {
        mail.settles.mutate { settles -> [Int] in
            defer { settles = [] }
            return settles
        }
    }

    /// An item of the outbox, as numbers: an event's fields, or the work a settle settles, which
    /// it says by posting it.
    private func code(_ item: Outbox<String>.Item) -> [Int] {
        switch item {
        case .event(let event):
            return Self.code(event)
        case .settle(let settle):
            settle()
            return [0] + takeSettles()
        }
    }

    /// Every field of an event but its key, which is always "k", as numbers.
    private static func code(_ event: CoalescingEvent<String>) -> [Int] {
        switch event {
        case .workStarted(_, let work): [1, work]
        case .callerJoined(_, let work, let callers): [2, work, callers]
        case .callerWithdrawn(_, let work, let reason): [3, work, reason == .timedOut ? 1 : 0]
        case .priorityChanged(_, let work, .operation(let priority)): [4, work, code(Urgency(priority))]
        case .priorityChanged(_, let work, .task(let priority)): [5, work, Int(priority.rawValue)]
        case .workEnded(_, let work, let outcome, let error, let served, let duration):
            [
                6, work, outcome == .succeeded ? 0 : outcome == .failed ? 1 : 2, error == nil ? 0 : 1, served,
                Int(duration.components.seconds),
            ]
        case .workStalled(_, let work, let callers, let elapsed): [7, work, callers, Int(elapsed.components.seconds)]
        }
    }

    private func describe(_ items: [Outbox<String>.Item]) -> String {
        "["
            + items.map { item in
                switch item {
                case .event(let event): "\(event)"
                case .settle: "settle work \(code(item).dropFirst().map(String.init).joined())"
                }
            }.joined(separator: ", ") + "]"
    }

    private func insert(_ value: Int, into list: inout [Int]) {
        list.insert(value, at: list.firstIndex { $0 > value } ?? list.count)
    }

    // MARK: What callers receive, checked as it arrives

    private func deliverMail() {
        let mail = mail.calls.mutate { mail -> [(caller: Int, result: Result<Int, Error>)] in
            defer { mail = [] }
            return mail
        }
        for (caller, result) in mail {
            last(caller, result)
        }
    }

    private func progress(_ i: Int) {
        if callers[i].lastCalls > 0 { fail("caller \(i) received progress after its last call (Guarantee 24)") }
        if callers[i].withdrew != nil { fail("caller \(i) received progress after it withdrew (Guarantee 26)") }
        callers[i].progressCalls += 1
        callers[i].inCall = true
    }

    func last(_ i: Int, _ result: Result<Int, Error>) {
        let record = callers[i]
        if record.lastCalls > 0 { fail("caller \(i) was called back twice (Guarantee 2)") }
        if record.inCall { fail("caller \(i) heard its last call during a progress call (Guarantee 24)") }
        if let own = record.withdrew, "\(own)" != "\(result)" {
            fail("caller \(i) withdrew with \(own) but heard \(result) (Guarantees 5 and 26)")
        }
        if record.withdrew == nil, !settled[record.work!] {
            fail("caller \(i) heard \(result) before its work's end was carried out (Guarantees 6 and 22)")
        }
        if record.withdrew == nil, !endDelivered.contains(record.work!) {
            fail("caller \(i) heard \(result) before the observer heard of its work's end (Guarantee 22)")
        }
        callers[i].lastCalls += 1
    }

    private func fail(_ message: String) {
        if failure == nil { failure = message }
    }

    // MARK: Invariants after every step

    /// The observer receives `event`.
    private func observe(_ event: CoalescingEvent<String>) {
        switch event {
        case .workStarted: workEvents.started += 1
        case .workEnded(_, let work, _, _, _, _):
            workEvents.ended += 1
            endDelivered.insert(work - 1)
        case .callerJoined, .callerWithdrawn, .priorityChanged, .workStalled:
            if !forgot, workEvents.started == workEvents.ended { fail("an event of no work in flight: \(event)") }
        }
        if workEvents.ended > workEvents.started || (!forgot && workEvents.started - workEvents.ended > 1) {
            fail("events of successive work interleave (Guarantee 22)")
        }
    }

    private func checkInvariants() {
        if scenario.delivers {
            scanRecorded()
        } else {
            for item in machine.outbox!.takeEvents() {
                guard case .event(let event) = item else { continue }
                observe(event)
            }
        }
        // Forgotten work stays within reach of cancelAll() until it is decided (Guarantee 16).
        let forgotten = machine.forgotten.values.map { work in works.firstIndex { $0 === work } ?? -1 }
        if Set(forgotten) != Set(works.indices.filter { !isDecided($0) && $0 != expectedIndexed }) {
            fail("the machine keeps \(forgotten) as forgotten work in flight (Guarantee 16)")
        }
        let indexed = machine.index.work(for: "k", hash: "k".hashValue)
        if indexed !== expectedIndexed.map({ works[$0] }) {
            fail(
                "the index holds \(indexed.map { w in works.firstIndex { $0 === w }! }.map(String.init) ?? "nothing")"
                    + " instead of \(expectedIndexed.map(String.init) ?? "nothing") (Guarantees 7 and 16)")
        }
        for (index, work) in works.enumerated() {
            checkRestatedFields(of: work, index)
            if work.state.priority.writer !== holders[index] {
                fail("work \(index)'s writer is not the one thread that holds the right to write (Guarantee 19)")
            }
            guard case .running = work.state.phase else {
                if case .stored(let value, let expiry) = work.state.phase,
                    stored?.work != index || value != 42 + index || expiry != .seconds(stored!.expiry)
                {
                    fail(
                        "work \(index) keeps \(value) until \(expiry), where the model stores "
                            + "\(String(describing: stored)) (Guarantee 15)")
                }
                continue
            }
            if work.state.target != target(of: index) {
                fail(
                    "work \(index) asks \(work.state.target) where its callers and floor ask "
                        + "\(target(of: index)) (Guarantee 19)")
            }
            let waiting = callers.indices.filter {
                callers[$0].work == index && work.state.callers.entries[callers[$0].slot].caller.waits
            }
            if work.state.callers.live != waiting.count {
                fail("work \(index) counts \(work.state.callers.live) callers, \(waiting.count) wait (Guarantee 21)")
            }
            // Nobody writes the priority, nor will: the operation has what its callers ask.
            if scenario.writes, holders[index] == nil, !writersDue.contains(index), !hasStarted(index),
                written[index] != target(of: index)
            {
                fail(
                    "work \(index)'s operation has \(written[index]) where its callers and floor ask "
                        + "\(target(of: index)), and nobody writes it (Guarantee 19)")
            }
        }
        if let stored, case .stored = works[stored.work].state.phase {
            if machine.nextExpiry.map({ $0 > .seconds(stored.expiry) }) ?? true {
                fail(
                    "work \(stored.work)'s value expires at \(stored.expiry) s, and the machine sweeps at "
                        + "\(String(describing: machine.nextExpiry)) (Guarantee 15)")
            }
        } else if let stored {
            fail("work \(stored.work)'s value was stored and is gone (Guarantee 15)")
        }
        checkStatistics()
        enabled = events
        guard enabled.isEmpty else { return }
        for (i, record) in callers.enumerated() where record.lastCalls != (record.foundStored ? 0 : 1) {
            fail("at rest, caller \(i) had \(record.lastCalls) last calls (Guarantee 2)")
        }
        let s = machine.statistics
        if s.callersArrived != s.callersServed + s.callersWithdrawn + s.callersTimedOut {
            fail("at rest, arrivals are not departures: \(s) (Guarantee 21)")
        }
        if scenario.delivers, !machine.outbox!.pending.isEmpty || machine.outbox!.isDelivering || !undelivered.isEmpty {
            fail("at rest, events were left undelivered: \(describe(undelivered)) (Guarantee 22)")
        }
    }

    /// The statistics count every caller when it arrives and when it leaves, and every work when
    /// it starts and ends, each in the step of the change (Guarantee 21). Each outcome is checked by
    /// how much it grew in the step.
    private func checkStatistics() {
        var expected = CoalescingStatistics()
        expected.workStarted = works.count
        for record in callers where record.arrived && !record.foundStored && !record.turnedAway {
            expected.callersArrived += 1
            if let withdrew = record.withdrew {
                if Self.code(withdrew) == -3 { expected.callersTimedOut += 1 } else { expected.callersWithdrawn += 1 }
            } else if record.took != nil || record.work.map(isDecided) == true {
                expected.callersServed += 1
            }
        }
        expected.callersJoined = expected.callersArrived - works.count
        expected.workSucceeded = stepStart.workSucceeded + stepEnds.filter { $0 == .succeeded }.count
        expected.workFailed = stepStart.workFailed + stepEnds.filter { $0 == .failed }.count
        expected.workCancelled = stepStart.workCancelled + stepEnds.filter { $0 == .cancelled }.count
        if machine.statistics != expected {
            fail("the statistics say \(machine.statistics), not \(expected) (Guarantee 21)")
        }
    }

    /// The counts of a work's callers restate its slots, and must agree with them (issue 34):
    /// the callers waiting, the tasks not parked, whether every caller is a handler on one queue.
    /// A stored value waits in the index, or is gone. A settled work holds no handler or operation
    /// any more, so that nothing it kept alive outlives its one call (Guarantee 2, the machine's
    /// side of the leak of issue 34).
    private func checkRestatedFields(of work: Work<String, Int>, _ index: Int) {
        let callers = work.state.callers
        var (live, unparked) = (0, 0)
        // A list said to be on one queue (the scenarios' handlers are on none) is served whole: it
        // may hold only such handlers, and callers that had their last call.
        var onOneQueue = true
        for (slot, caller) in callers.entries.map(\.caller).enumerated() {
            if caller.waits { live += 1 }
            switch caller {
            case .arriving, .owed, .held: unparked += 1
            case .handler, .operation, .parked, .gone: break
            }
            switch caller {
            case .handler(_, nil), .gone: break
            case .handler, .operation, .arriving, .parked, .owed, .held: onOneQueue = false
            }
            switch caller {
            case .handler, .operation:
                if settled[index] { fail("work \(index) was settled and still holds caller \(slot) (Guarantee 2)") }
            case .arriving, .parked, .owed, .held, .gone:
                break
            }
        }
        if case .running = work.state.phase, callers.live != live {
            fail("work \(index) counts \(callers.live) callers waiting, not \(live)")
        }
        if callers.unparked != unparked {
            fail("work \(index) counts \(callers.unparked) tasks not parked, not \(unparked)")
        }
        if case .one = callers.queues, !onOneQueue {
            fail("work \(index) says its callers are handlers on one queue, and they are not")
        }
        if case .stored = work.state.phase, machine.index.work(for: "k", hash: "k".hashValue) !== work {
            fail("work \(index) keeps a stored value that no key finds")
        }
    }

    /// Everything that decides what can happen next, and what the checks will say, hashed. A
    /// work's part is its state, the one value: `hashedFields` names every field it hashes, and
    /// the explorer fails if the state has a field that is not among them; the machine's fields
    /// are named likewise.
    var key: Int {
        var h = Hasher()
        h.combine(reportsMade)
        h.combine(used)
        h.combine(forgot)
        h.combine(expectedIndexed)
        h.combine(workEvents.started)
        h.combine(workEvents.ended)
        h.combine(settled)
        h.combine(decided)
        h.combine(pending.map(\.work))
        // What only some scenarios change: elsewhere the same in every state, or restated by the
        // rest (the works whose end the observer heard are the decided ones, each step's events
        // delivered at its end).
        if scenario.prefetches {
            h.combine([now, stored?.work ?? -1, stored?.expiry ?? -1])
            for work in works { h.combine(work.startedAt?.components.seconds) }
        }
        if scenario.writes {
            h.combine(floorsSet)
            h.combine(writersDue)
            h.combine(holders.keys.sorted())
            h.combine(written.map(Self.code))
        }
        if scenario.delivers {
            h.combine(endDelivered)
            h.combine(offers)
            h.combine(deliverer?.batch.map(code))
            h.combine(deliverer?.settles)
            h.combine(undelivered.map(code))
            h.combine(pendingKnown)
            h.combine(machine.outbox.map { $0.pending.map(code) })
        }
        Self.combine(machine, into: &h)
        if !machine.forgotten.isEmpty {
            h.combine(machine.forgotten.values.map { work in works.firstIndex { $0 === work }! }.sorted())
        }
        for work in works { Self.combine(work.state, into: &h) }
        for record in callers {
            h.combine([record.work ?? -1, record.slot, record.progressCalls, record.lastCalls, record.took ?? -1])
            h.combine([
                record.arrived, record.foundStored, record.turnedAway, record.parked, record.left, record.raised,
            ])
            h.combine([record.inCall, record.delivering])
            h.combine(record.withdrew.map(Self.code))
        }
        return h.finalize()
    }

    /// The fields of a work's state and of its parts, and of the machine, that the key hashes.
    static let hashedFields = [
        "WorkState": ["phase", "runner", "callers", "priority", "calls", "progress", "isPrefetch", "storing"],
        "Callers": ["entries", "queues", "live", "arrivals", "unparked"],
        "Slot": ["caller", "demand"],
        "PriorityState": ["floor", "applied", "risesOnly", "writer", "isFrozen"],
        // The index and the forgotten work by their works, the outbox's pending items by their
        // descriptions, beside the rest here.
        "Machine": ["index", "forgotten", "statistics", "outbox", "prefetchTimeout", "nextExpiry"],
        "Outbox": ["pending", "spare", "isDelivering"],
    ]

    /// The fields of `state` and its parts that ``hashedFields`` does not name.
    static func unhashedFields(of state: WorkState<Int>) -> [String] {
        unhashed([
            ("WorkState", state), ("Callers", state.callers), ("PriorityState", state.priority),
            ("Slot", Slot<Int>(.gone)),
        ])
    }

    /// The fields of `machine` and its outbox that ``hashedFields`` does not name.
    static func unhashedFields(of machine: Machine<String>) -> [String] {
        unhashed([("Machine", machine), ("Outbox", machine.outbox!)])
    }

    private static func unhashed(_ parts: [(String, Any)]) -> [String] {
        parts.flatMap { name, part in
            Mirror(reflecting: part).children.compactMap(\.label).filter { !hashedFields[name]!.contains($0) }
                .map { "\(name).\($0)" }
        }
    }

    /// The machine's fields but its index, forgotten work and pending events. Of the statistics,
    /// the counts of callers and of work started; the outcomes are checked by their change in
    /// each step, and the machine never reads them.
    private static func combine(_ machine: Machine<String>, into h: inout Hasher) {
        let s = machine.statistics
        h.combine([s.workStarted, s.callersArrived, s.callersJoined, s.callersWithdrawn, s.callersTimedOut])
        h.combine(s.callersServed)
        h.combine(machine.prefetchTimeout?.components.seconds)
        h.combine(machine.nextExpiry?.components.seconds)
        h.combine(machine.outbox.map { [$0.isDelivering ? 1 : 0, $0.spare.count] })
    }

    private static func combine(_ state: WorkState<Int>, into h: inout Hasher) {
        switch state.phase {
        case .running: h.combine(0)
        case .deciding: h.combine(1)
        case .ended: h.combine(2)
        case .stored(let value, let expiry): h.combine([3, value, Int(expiry.components.seconds)])
        }
        // The runner is the work's operation, or a task's that is never created: the same in every copy.
        h.combine([state.callers.live, state.callers.arrivals, state.callers.unparked])
        switch state.callers.queues {
        case .none: h.combine(0)
        case .one(nil): h.combine(1)
        case .one(let queue?): h.combine([2, ObjectIdentifier(queue).hashValue])
        case .several: h.combine(3)
        }
        for slot in state.callers.entries {
            combine(slot.caller, into: &h)
            h.combine(slot.demand.map(code) ?? -1)
        }
        let priority = state.priority
        h.combine([code(priority.floor), code(priority.applied)])
        h.combine([priority.risesOnly, priority.isFrozen])
        // Whether a thread writes: its group is the one the machine made for it, checked at every step.
        h.combine(priority.writer != nil)
        for (slot, call) in state.calls.sorted(by: { $0.key < $1.key }) {
            h.combine([slot, Int(call.latest?.completed ?? -1), call.busy ? 1 : 0])
            if let last = call.last {
                combine(last.caller, into: &h)
                h.combine(code(last.result))
            }
        }
        h.combine(state.progress?.completed)
        h.combine(state.isPrefetch)
        h.combine(state.storing != nil)
    }

    private static func code(_ urgency: Urgency) -> Int { Int(urgency.queue) * 256 + Int(urgency.service) }

    private static func code(_ result: Result<Int, Error>) -> Int {
        switch result {
        case .success(let value): value
        case .failure(is WorkError): -1
        case .failure(CoalescingError.cancelled): -2
        case .failure(CoalescingError.timedOut): -3
        case .failure: -4
        }
    }

    private static func combine(_ caller: Caller<Int>, into h: inout Hasher) {
        switch caller {
        case .handler: h.combine(1)
        case .operation: h.combine(2)
        case .arriving(let consumes): h.combine([3, consumes ? 1 : 0])
        case .parked(let c, let consumes):
            h.combine([4, Int(bitPattern: unsafeBitCast(c, to: UInt.self)), consumes ? 1 : 0])
        case .owed(let result): h.combine([5, code(result)])
        case .held(let c, let result): h.combine([6, Int(bitPattern: unsafeBitCast(c, to: UInt.self)), code(result)])
        case .gone: h.combine(7)
        }
    }

    /// A world in the same state, whose works are copies: a work's state is one value, so a copy
    /// is a new object holding it.
    func copy() -> World {
        let copy = World(scenario, mail: mail)
        copy.works = works.map { work in
            let clone = Work<String, Int>(
                key: work.key, hash: work.hash, number: work.number, runner: work.state.runner, policy: work.policy,
                floor: Self.floor,
                startedAt: work.startedAt)
            clone.state = work.state
            return clone
        }
        func cloned(_ work: AnyWork<String>) -> AnyWork<String> {
            copy.works[works.firstIndex { $0 === work }!]
        }
        copy.machine = machine
        copy.machine.index = WorkIndex()
        for work in machine.index.works { copy.machine.index.insert(cloned(work)) }
        // Forgotten work is found by its object's identity: the copy's, or deciding a copy would
        // leave the original's entry behind.
        copy.machine.forgotten = Dictionary(
            uniqueKeysWithValues: machine.forgotten.values.map { work in
                let clone = cloned(work)
                return (ObjectIdentifier(clone), clone)
            })
        (copy.settled, copy.decided, copy.callers, copy.used, copy.reportsMade) = (
            settled, decided, callers, used, reportsMade
        )
        (copy.pending, copy.expectedIndexed, copy.forgot, copy.workEvents) =
            (pending, expectedIndexed, forgot, workEvents)
        (copy.endDelivered, copy.now, copy.stored, copy.floorsSet) = (endDelivered, now, stored, floorsSet)
        (copy.writersDue, copy.holders, copy.written) = (writersDue, holders, written)
        (copy.offers, copy.deliverer, copy.undelivered, copy.pendingKnown) =
            (offers, deliverer, undelivered, pendingKnown)
        return copy
    }
}

private struct Explorer {
    var distinct = 0
    var steps = 0
    let mail = Mail()

    /// Explores every order of `scenario`'s events, depth first, from each state seen for the first
    /// time; returns the first broken invariant with the events that led to it.
    mutating func explore(_ scenario: Scenario) -> String? {
        var seen: Set<Int> = []
        let root = World(scenario, mail: mail)
        root.perform(.arrive(0))
        var stack: [(World, [Event])] = [(root, [])]
        while let (world, path) = stack.popLast() {
            if let failure = world.failure {
                let trace = (["caller 0 arrives"] + path.map(\.description)).enumerated().map { "  \($0 + 1). \($1)" }
                return "\(failure)\nwith \(scenario), after:\n" + trace.joined(separator: "\n")
            }
            guard seen.insert(world.key).inserted else { continue }
            for event in world.enabled {
                let next = world.copy()
                next.perform(event)
                steps += 1
                stack.append((next, path + [event]))
            }
        }
        distinct += seen.count
        // Each scenario's count, to see where the time goes when a scenario is added.
        if ProcessInfo.processInfo.environment["EXPLORER_VERBOSE"] != nil { print("  \(seen.count): \(scenario)") }
        return nil
    }
}
