#if Postgres
import Foundation

// What a process tells the others, and the names it uses: a leader's publication, the channel's
// messages, a key's lock. Plain values, with no database package, like the state machines that
// carry them, so that .ci/session-explorer-catches compiles those without postgres-nio.

/// What a leader hands the session: its result, encoded, to publish for the other processes before
/// its lock is released.
struct Publication: Sendable, Hashable {
    static let threw: Int16 = 1
    static let tooLarge: Int16 = 2
    /// A notification's payload is at most 8000 bytes; a small value travels in it, so that the
    /// processes waiting need not read the table.
    static let inlineLimit = 4000

    let lock: Int64
    let key: String
    let started: Int64
    let generation: Int
    /// The row's sequence value once the result is written to the table; 0 for a result that
    /// travels in its notification, which the session numbers as it sends it.
    var sequence: Int64 = 0
    let value: Data?
    /// 0 for a value, `threw` or `tooLarge` for a failure.
    let failureKind: Int16
    let failure: String
    /// ` <key in hex> <value as JSON>`, or empty when the value does not fit in a notification.
    let inline: String
}

/// What the table's channel carries, written and read here only. A result is
/// `<lock> <sequence> <started>`, then ` <key in hex> <value as JSON>` when the value travels in
/// it; a release is `<lock> released <how>`.
enum ChannelMessage: Hashable {
    case result(lock: Int64, sequence: Int64, started: Int64, inline: Heard.Inline?)
    case released(lock: Int64, published: Bool)
    case other

    init(_ payload: String) {
        self = .other
        let words = payload.split(separator: " ", maxSplits: 4, omittingEmptySubsequences: false)
        guard words.count >= 3, let lock = Int64(words[0]) else { return }
        if words[1] == "released" {
            self = .released(lock: lock, published: words[2] == Release.published.rawValue)
        } else if let sequence = Int64(words[1]), let started = Int64(words[2]) {
            let inline = words.count == 5 ? Heard.Inline(key: words[3], json: words[4]) : nil
            self = .result(lock: lock, sequence: sequence, started: started, inline: inline)
        }
    }

    /// A publication's announcement. A result in the table is numbered by its row; one that
    /// travels, by its run's start, which orders it after every earlier result of its lock as
    /// well, since the runs of a lock never overlap and a run starts after the last one's row was
    /// written.
    static func announcing(_ publication: Publication) -> String {
        let sequence = publication.sequence == 0 ? publication.started : publication.sequence
        return "\(publication.lock) \(sequence) \(publication.started)\(publication.inline)"
    }

    /// A release's announcement.
    static func releasing(_ lock: Int64, _ release: Release) -> String {
        "\(lock) released \(release.rawValue)"
    }

    /// A key's bytes in hex: how a notification names the key of the value it carries.
    static func hex(_ key: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(key.utf8.count * 2)
        for byte in key.utf8 {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A key's advisory lock: 64 bits of FNV-1a over the table's name and the key's bytes, computed
/// here so that keys of any content (NUL included) and any length hash alike in every process.
/// Keys whose locks collide only take turns; results are matched by the full key.
struct LockKey {
    let value: Int64

    init(table: String, key: String) {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in table.utf8 + [0xFF] + key.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
        }
        value = Int64(bitPattern: hash)
    }

    /// A lock's watch: the shared advisory lock, in PostgreSQL's space of two-`int4` keys (apart
    /// from the one-`bigint` keys of the locks), that the sessions whose steps wait for the lock
    /// hold. See ``SessionStateMachine``.
    static func watch(_ lock: Int64) -> (Int32, Int32) {
        (Int32(truncatingIfNeeded: lock >> 32), Int32(truncatingIfNeeded: lock))
    }
}
#endif
