import TestSupport
import XCTest

@testable import CoalescingOperations

/// The machine's index keeps every work it holds reachable from its key's hash, whatever the
/// collisions and the order of inserts, replacements and removals: a caller always finds the work in
/// flight (Guarantee 1), old work never removes newer work (Guarantee 7), and forgotten work leaves
/// it (Guarantee 16). Hashes are chosen here, few and colliding, so that the probes run long, wrap
/// around the end of the table and shift back across it.
final class WorkIndexTests: XCTestCase {
    private func work(_ key: String, hash: Int) -> Work<String, Int> {
        Work(
            key: key, hash: hash, number: 1, runner: .unstarted, policy: .cancel, floor: Urgency(OperationPriority()),
            startedAt: nil)
    }

    func testEveryWorkStaysReachableThroughThousandsOfRandomInsertsReplacementsAndRemovals() {
        let seed =
            ProcessInfo.processInfo.environment["COALESCING_STRESS_SEED"].flatMap(UInt64.init)
            ?? .random(in: 0...UInt64.max)
        var random = SplitMix64(seed: seed)
        var index = WorkIndex<String>()
        var model: [String: Work<String, Int>] = [:]
        let keys = (0..<64).map { "key-\($0)" }
        // Eight hashes for 64 keys, -4 to 3: at any size, homes in the table's last slots and its
        // first, so that the runs wrap around its end.
        let hashes = Dictionary(uniqueKeysWithValues: keys.map { ($0, Int(random.next() % 8) - 4) })
        for step in 0..<10_000 {
            let key = keys[Int(random.next() % UInt64(keys.count))]
            switch random.next() % 3 {
            case 0:
                // A new work for the key, in place of any indexed: the index holds the newer.
                let new = work(key, hash: hashes[key]!)
                index.insert(new)
                model[key] = new
            case 1:
                // The indexed work ends: it leaves.
                if let indexed = model.removeValue(forKey: key) {
                    XCTAssertTrue(index.remove(indexed), "seed \(seed), step \(step): \(key)'s work did not leave")
                }
            default:
                // Old work of the key ends late: the newer work stays (Guarantee 7).
                let old = work(key, hash: hashes[key]!)
                XCTAssertFalse(index.remove(old), "seed \(seed), step \(step): old work removed \(key)'s entry")
            }
            for probe in keys where index.work(for: probe, hash: hashes[probe]!) !== model[probe] {
                return XCTFail("seed \(seed), step \(step): the index lost or mixed up \(probe)'s work (Guarantee 1)")
            }
            XCTAssertEqual(index.count, model.count, "seed \(seed), step \(step)")
        }
        XCTAssertEqual(Set(index.works.map(ObjectIdentifier.init)), Set(model.values.map(ObjectIdentifier.init)))
    }

    func testEqualHashesOfOtherKeysNeverJoin() {
        var index = WorkIndex<String>()
        let first = work("a", hash: 7)
        let second = work("b", hash: 7)
        index.insert(first)
        XCTAssertNil(index.work(for: "b", hash: 7), "a key found another key's work through its hash (Guarantee 1)")
        index.insert(second)
        XCTAssertTrue(index.remove(first))
        XCTAssertTrue(index.work(for: "b", hash: 7) === second, "the work behind a removed one was lost (Guarantee 16)")
    }
}
