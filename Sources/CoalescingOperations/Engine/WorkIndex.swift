/// The machine's index: the work a new caller of a key joins, at most one work a key.
///
/// An open-addressing table (linear probing) whose works carry their key's hash, taken once when
/// the key arrives: indexing the work and taking it out again hash nothing. `Dictionary` takes no
/// hash of ours, so a never-coalescing operation hashed its identifier three times, a third of what
/// the manager adds to a raw queue's operation (BENCHMARKS.md, issue 45). The hashes are the keys'
/// own `hashValue`s, seeded per process as `Dictionary`'s are, so keys chosen to collide are no
/// easier to find here.
@usableFromInline struct WorkIndex<Key: Hashable & Sendable> {
    /// A power of two of slots, never more than three quarters full, so that every probe ends at an
    /// empty slot; none until the first work.
    @usableFromInline var slots: [AnyWork<Key>?] = []
    @usableFromInline var count = 0

    /// The slot of the work indexed under `key`, whose hash is `hash`, or the empty slot where it
    /// would go. Only with slots.
    @inlinable func slot(of key: Key, hash: Int) -> Int {
        let mask = slots.count - 1
        var slot = hash & mask
        while let work = slots[slot], work.hash != hash || work.key != key {
            slot = (slot + 1) & mask
        }
        return slot
    }

    /// The work indexed under `key`, whose hash is `hash`.
    @inlinable func work(for key: Key, hash: Int) -> AnyWork<Key>? {
        if slots.isEmpty { return nil }
        return slots[slot(of: key, hash: hash)]
    }

    /// Indexes `work` under its key, in place of the work indexed there, if any.
    @inlinable mutating func insert(_ work: AnyWork<Key>) {
        if (count + 1) * 4 > slots.count * 3 { grow() }
        let slot = slot(of: work.key, hash: work.hash)
        if slots[slot] == nil { count += 1 }
        slots[slot] = work
    }

    /// Takes `work` out if it is the work indexed under its key; returns whether it was.
    @inlinable @discardableResult mutating func remove(_ work: AnyWork<Key>) -> Bool {
        if slots.isEmpty { return false }
        var hole = slot(of: work.key, hash: work.hash)
        guard slots[hole] === work else { return false }
        slots[hole] = nil
        count -= 1
        // Backward shift: each later work of the run moves into the hole if the hole is on its
        // probe from its home slot, so that every work stays reachable from its home.
        let mask = slots.count - 1
        var next = (hole + 1) & mask
        while let later = slots[next] {
            if (next - (later.hash & mask)) & mask >= (next - hole) & mask {
                slots[hole] = later
                slots[next] = nil
                hole = next
            }
            next = (next + 1) & mask
        }
        return true
    }

    /// Every work indexed, in no order.
    @usableFromInline var works: [AnyWork<Key>] { slots.compactMap { $0 } }

    /// Inlinable, as the rest: unspecialized, each work moved looked its type up at run time.
    @inlinable mutating func grow() {
        let old = slots
        slots = Array(repeating: nil, count: max(8, old.count * 2))
        count = 0
        for case let work? in old { insert(work) }
    }
}
