import Foundation
import TestSupport
import XCTest

@testable import CoalescingOperations

/// Guarantees 2, 5, 7, 10, 13, 16, 17, 18, 19, 21, 22, 24, 25 and 26, checked on the engine's
/// state machine alone: every order of the events of small scenarios, explored exhaustively,
/// with the guarantees as invariants after every step.
///
/// The test plays the storage's part: it sends the machine one event at a time and carries the
/// actions out itself, recording every call each caller receives. A delivery of progress starts
/// and finishes as events of their own, so calls can overlap with everything else. Since a
/// state's future depends on nothing else, a state seen before is not explored again; the test
/// prints how many distinct states it saw. A broken invariant fails with the events that led to
/// it, one per line.
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

    private func explore(_ scenarios: [Scenario], name: String) {
        // A field the hash leaves out would merge states that differ, and skip their futures.
        let state = WorkState<Int>(runner: .unstarted, priority: PriorityState(floor: World.floor, risesOnly: false))
        XCTAssertEqual(World.unhashedFields(of: state), [], "fields of a work's state that the explorer does not hash")
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

private enum Kind: CaseIterable { case handler, task, joinedOperation }

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

    /// Every plan for one caller, alone or followed by a second.
    static let upToTwo: [[CallerPlan]] = {
        let one = Kind.allCases.flatMap { kind in
            [false, true].flatMap { progress in
                Leaving.allCases.map { CallerPlan(kind: kind, progress: progress, leaving: $0, raises: $0 == .stays) }
            }
        }
        return one.map { [$0] } + one.flatMap { first in one.map { [first, $0] } }
    }()
}

private struct Scenario {
    let plans: [CallerPlan]
    /// How many times the work reports progress.
    let reports: Int
    let fails: Bool
    let control: Control?
    let policy: AbandonedWorkPolicy
}

private enum Event: Hashable, CustomStringConvertible {
    case arrive(Int), park(Int), leave(Int), finishByHand(Int), raise(Int)
    case report, finish(work: Int), control, settle(work: Int), call(Int)

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
        }
    }
}

// MARK: - The explorer

private struct WorkError: Error, Equatable {}

/// What the test knows of one caller.
private struct CallerRecord {
    var work: Int?
    var slot = 0
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

/// One run of a scenario along one order of events, rebuilt from the start for each order.
private final class World {
    let scenario: Scenario
    var machine = Machine<String>(observed: true, prefetchTimeout: nil)
    var works: [Work<String, Int>] = []
    var settled: [Bool] = []
    var callers: [CallerRecord]
    var used: Set<Event> = []
    var reportsMade = 0
    var pending: [(work: Int, result: Result<Int, Error>)] = []
    var expectedIndexed: Int?
    var forgot = false
    var workEvents = (started: 0, ended: 0)
    var failure: String?
    /// What handlers were called with, in order: they are `@Sendable`, so they post here.
    let mailbox: LockedBox<[(caller: Int, result: Result<Int, Error>)]>

    init(_ scenario: Scenario, mailbox: LockedBox<[(caller: Int, result: Result<Int, Error>)]>) {
        self.scenario = scenario
        self.mailbox = mailbox
        callers = scenario.plans.map { _ in CallerRecord() }
    }

    static let floor = Urgency(OperationPriority())

    func urgency(of caller: Int) -> Urgency {
        let levels: [Operation.QueuePriority] = [.low, .high, .veryHigh]
        let raised: Operation.QueuePriority = callers[caller].raised ? .veryHigh : levels[caller]
        return Urgency(OperationPriority(queuePriority: raised, qualityOfService: caller == 2 ? .utility : .default))
    }

    /// A stand-in for a task's continuation, which the machine stores and hands back but never
    /// resumes: the caller's number, in the continuation's one word.
    func continuation(of caller: Int) -> UnsafeContinuation<Int, Error> {
        unsafeBitCast(UnsafeRawPointer(bitPattern: 0x1000 + caller)!, to: UnsafeContinuation<Int, Error>.self)
    }

    func caller(_ i: Int) -> Caller<Int> {
        switch scenario.plans[i].kind {
        case .handler: return .handler({ [mailbox] result in mailbox.mutate { $0.append((i, result)) } }, queue: nil)
        case .task: return .arriving(consumes: false)
        case .joinedOperation:
            let operation = CoalescibleOperation<Int>(identifier: "k") { [mailbox] result in
                mailbox.mutate { $0.append((i, result)) }
            }
            return .operation(operation)
        }
    }

    // MARK: Events

    var enabled: [Event] {
        var events: [Event] = []
        for (i, record) in callers.enumerated() {
            let plan = scenario.plans[i]
            guard record.work != nil else {
                if i == 0 || callers[i - 1].work != nil { events.append(.arrive(i)) }
                continue
            }
            if plan.kind == .task, !record.parked { events.append(.park(i)) }
            if plan.leaving != .stays, !record.left { events.append(.leave(i)) }
            if plan.kind == .joinedOperation, !used.contains(.finishByHand(i)) { events.append(.finishByHand(i)) }
            if plan.raises, !record.raised { events.append(.raise(i)) }
            if record.delivering { events.append(.call(i)) }
        }
        if reportsMade < scenario.reports { events.append(.report) }
        events += works.indices.filter { !used.contains(.finish(work: $0)) }.map { .finish(work: $0) }
        if scenario.control != nil, !used.contains(.control) { events.append(.control) }
        events += pending.map { .settle(work: $0.work) }
        return events
    }

    func perform(_ event: Event) {
        used.insert(event)
        switch event {
        case .arrive(let i):
            let work: Int
            if let running = machine.inFlight("k", as: Int.self) {
                work = works.firstIndex { $0 === running }!
            } else {
                let runner = CoalescibleOperation<Int>(identifier: "k")
                works.append(
                    machine.newWork(
                        "k", runner: .operation(runner), policy: scenario.policy, floor: Self.floor, at: nil))
                settled.append(false)
                work = works.count - 1
                machine.start(works[work])
                expectedIndexed = work
            }
            let sink = scenario.plans[i].progress ? ProgressSink(queue: nil) { _ in } : nil
            let joined = machine.join(works[work], caller(i), asking: urgency(of: i), watching: sink)
            (callers[i].work, callers[i].slot) = (work, joined.slot)
            if joined.delivers { callers[i].delivering = true }
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
            _ = machine.reprioritize(works[record.work!], slot: record.slot, to: urgency(of: i))
        case .report:
            reportsMade += 1
            let reported = machine.report(WorkProgress(completed: Int64(reportsMade), total: 2), for: works[0])
            for (slot, _) in reported.starting {
                callers[caller(in: 0, slot: slot)].delivering = true
            }
        case .finish(let work):
            let result: Result<Int, Error> = scenario.fails && work == 0 ? .failure(WorkError()) : .success(42)
            decide(work, machine.decide(works[work], with: result, stopping: false), result)
        case .control:
            switch scenario.control! {
            case .forget:
                let found = machine.forget(where: { $0 == "k" })
                if found == .some { forgot = true }
                expectedIndexed = nil
            case .cancelKey, .cancelAll:
                let all = scenario.control == .cancelAll
                for work in machine.cancelAll(where: { $0 == "k" }, includingForgotten: all).works {
                    let index = works.firstIndex { $0 === work }!
                    let cancelled = Result<Int, Error>.failure(CoalescingError.cancelled)
                    decide(index, machine.decide(works[index], with: cancelled, stopping: true), cancelled)
                }
            }
        case .settle(let work):
            let result = pending.first { $0.work == work }!.result
            pending.removeAll { $0.work == work }
            settled[work] = true
            let settled = machine.settle(works[work], with: result)
            for slot in settled.callers.entries {
                tell(slot.caller, result, work: work)
            }
            for owed in settled.held {
                tell(owed.caller, owed.result, work: work)
            }
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
        }
        checkInvariants()
    }

    private func leave(_ i: Int, reason: WithdrawalReason, hearing: Result<Int, Error>?) {
        let record = callers[i]
        let work = works[record.work!]
        if case .running = work.state.phase, work.state.callers.entries[record.slot].caller.isOpen {
            callers[i].withdrew = hearing ?? .failure(reason.error)
        }
        switch machine.withdraw(work, slot: record.slot, reason: reason, hearing: hearing) {
        case .late:
            break
        case .left(let told, _):
            if let told { tell(told.caller, told.result, work: record.work!) }
        case .abandoned(let decided, let told):
            decide(record.work!, decided, .failure(CoalescingError.cancelled))
            if let told { tell(told.caller, told.result, work: record.work!) }
        }
    }

    private func decide(_ work: Int, _ decided: Decided<Int>?, _ result: Result<Int, Error>) {
        guard decided != nil else { return }
        pending.append((work, result))
        if expectedIndexed == work { expectedIndexed = nil }
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

    // MARK: What callers receive, checked as it arrives

    private func deliverMail() {
        let mail = mailbox.mutate { mail -> [(caller: Int, result: Result<Int, Error>)] in
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
        callers[i].lastCalls += 1
    }

    private func fail(_ message: String) {
        if failure == nil { failure = message }
    }

    // MARK: Invariants after every step

    private func checkInvariants() {
        for item in machine.takeEvents() {
            guard case .event(let event) = item else { continue }
            switch event {
            case .workStarted: workEvents.started += 1
            case .workEnded: workEvents.ended += 1
            case .callerJoined, .callerWithdrawn:
                if !forgot, workEvents.started == workEvents.ended { fail("an event of no work in flight: \(event)") }
            case .priorityChanged, .workStalled: break
            }
            if workEvents.ended > workEvents.started || (!forgot && workEvents.started - workEvents.ended > 1) {
                fail("events of successive work interleave (Guarantee 22)")
            }
        }
        let indexed = machine.index["k"]
        if indexed !== expectedIndexed.map({ works[$0] }) {
            fail(
                "the index holds \(indexed.map { w in works.firstIndex { $0 === w }! }.map(String.init) ?? "nothing")"
                    + " instead of \(expectedIndexed.map(String.init) ?? "nothing") (Guarantees 7 and 16)")
        }
        for (index, work) in works.enumerated() {
            guard case .running = work.state.phase else { continue }
            let waiting = callers.indices.filter {
                callers[$0].work == index && work.state.callers.entries[callers[$0].slot].caller.waits
            }
            let expected = waiting.reduce(Self.floor) { $0.raised(to: urgency(of: $1)) }
            if work.state.target != expected {
                fail(
                    "work \(index) asks \(work.state.target) where its waiting callers \(waiting) ask \(expected) (Guarantee 19)"
                )
            }
            if work.state.callers.live != waiting.count {
                fail("work \(index) counts \(work.state.callers.live) callers, \(waiting.count) wait (Guarantee 21)")
            }
        }
        for (index, work) in works.enumerated() { checkRestatedFields(of: work, index) }
        guard enabled.isEmpty else { return }
        for (i, record) in callers.enumerated() where record.lastCalls != 1 {
            fail("at rest, caller \(i) had \(record.lastCalls) last calls (Guarantee 2)")
        }
        let s = machine.statistics
        if s.callersArrived != s.callersServed + s.callersWithdrawn + s.callersTimedOut {
            fail("at rest, arrivals are not departures: \(s) (Guarantee 21)")
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
        if case .stored = work.state.phase, machine.index["k"] !== work {
            fail("work \(index) keeps a stored value that no key finds")
        }
    }

    /// Everything that decides what can happen next, and what the checks will say, hashed. A
    /// work's part is its state, the one value: `hashedFields` names every field it hashes, and
    /// the explorer fails if the state has a field that is not among them.
    var key: Int {
        var h = Hasher()
        h.combine(reportsMade)
        h.combine(used)
        h.combine(forgot)
        h.combine(expectedIndexed)
        h.combine(workEvents.started)
        h.combine(workEvents.ended)
        h.combine(settled)
        h.combine(pending.map(\.work))
        let s = machine.statistics
        h.combine([s.callersArrived, s.callersServed, s.callersWithdrawn, s.callersTimedOut])
        for work in works { Self.combine(work.state, into: &h) }
        for record in callers {
            h.combine([record.work ?? -1, record.slot, record.progressCalls, record.lastCalls])
            h.combine([record.parked, record.left, record.raised, record.inCall, record.delivering])
            h.combine(record.withdrew.map(Self.code))
        }
        return h.finalize()
    }

    /// The fields of a work's state and of its parts that ``combine(_:into:)`` hashes.
    static let hashedFields = [
        "WorkState": ["phase", "runner", "callers", "priority", "calls", "progress", "isPrefetch"],
        "Callers": ["entries", "queues", "live", "arrivals", "unparked"],
        "Slot": ["caller", "demand"],
        "PriorityState": ["floor", "applied", "risesOnly", "writer", "isFrozen"],
    ]

    /// The fields of `state` and its parts that ``hashedFields`` does not name.
    static func unhashedFields(of state: WorkState<Int>) -> [String] {
        let parts: [(String, Any)] = [
            ("WorkState", state), ("Callers", state.callers), ("PriorityState", state.priority),
            ("Slot", Slot<Int>(.gone)),
        ]
        return parts.flatMap { name, part in
            Mirror(reflecting: part).children.compactMap(\.label).filter { !hashedFields[name]!.contains($0) }
                .map { "\(name).\($0)" }
        }
    }

    private static func combine(_ state: WorkState<Int>, into h: inout Hasher) {
        switch state.phase {
        case .running: h.combine(0)
        case .deciding: h.combine(1)
        case .ended: h.combine(2)
        case .stored(let value, let expiry): h.combine([3, value, Int(expiry.components.seconds)])
        }
        // The runner is the work's operation, the same in every copy: nothing to tell apart.
        h.combine([state.callers.live, state.callers.arrivals, state.callers.unparked])
        h.combine("\(state.callers.queues)")
        for slot in state.callers.entries {
            combine(slot.caller, into: &h)
            h.combine(slot.demand.map(code) ?? -1)
        }
        let priority = state.priority
        h.combine([code(priority.floor), code(priority.applied)])
        h.combine([priority.risesOnly, priority.writer != nil, priority.isFrozen])
        for (slot, call) in state.calls.sorted(by: { $0.key < $1.key }) {
            h.combine([slot, Int(call.latest?.completed ?? -1), call.busy ? 1 : 0])
            if let last = call.last {
                combine(last.caller, into: &h)
                h.combine(code(last.result))
            }
        }
        h.combine(state.progress?.completed)
        h.combine(state.isPrefetch)
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
        case .arriving: h.combine(3)
        case .parked(let c, _): h.combine([4, Int(bitPattern: unsafeBitCast(c, to: UInt.self))])
        case .owed(let result): h.combine([5, code(result)])
        case .held(let c, let result): h.combine([6, Int(bitPattern: unsafeBitCast(c, to: UInt.self)), code(result)])
        case .gone: h.combine(7)
        }
    }

    /// A world in the same state, whose works are copies: a work's state is one value, so a copy
    /// is a new object holding it.
    func copy() -> World {
        let copy = World(scenario, mailbox: mailbox)
        copy.works = works.map { work in
            let clone = Work<String, Int>(
                key: work.key, number: work.number, runner: work.state.runner, policy: work.policy, floor: Self.floor,
                startedAt: nil)
            clone.state = work.state
            return clone
        }
        func cloned(_ work: AnyWork<String>) -> AnyWork<String> {
            copy.works[works.firstIndex { $0 === work }!]
        }
        copy.machine = machine
        copy.machine.index = machine.index.mapValues(cloned)
        copy.machine.forgotten = machine.forgotten.mapValues(cloned)
        (copy.settled, copy.callers, copy.used, copy.reportsMade) = (settled, callers, used, reportsMade)
        (copy.pending, copy.expectedIndexed, copy.forgot, copy.workEvents) =
            (pending, expectedIndexed, forgot, workEvents)
        return copy
    }
}

private struct Explorer {
    var distinct = 0
    var steps = 0
    /// Where handlers post what they were called with: one thread explores, one world at a time.
    let mailbox = LockedBox<[(caller: Int, result: Result<Int, Error>)]>([])

    /// Explores every order of `scenario`'s events, depth first, from each state seen for the first
    /// time; returns the first broken invariant with the events that led to it.
    mutating func explore(_ scenario: Scenario) -> String? {
        var seen: Set<Int> = []
        let root = World(scenario, mailbox: mailbox)
        root.perform(.arrive(0))
        var stack: [(World, [Event])] = [(root, [])]
        while let (world, path) = stack.popLast() {
            if let failure = world.failure {
                let trace = (["caller 0 arrives"] + path.map(\.description)).enumerated().map { "  \($0 + 1). \($1)" }
                return
                    "\(failure)\nwith callers \(scenario.plans.map(\.description).joined(separator: "; ")), reports \(scenario.reports), "
                    + "control \(scenario.control.map { "\($0)" } ?? "none"), policy \(scenario.policy), after:\n"
                    + trace.joined(separator: "\n")
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
        return nil
    }
}
