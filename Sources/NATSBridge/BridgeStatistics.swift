import Synchronization

/// A snapshot of the bridge for `eventbus status`.
public struct BridgeStatistics: Sendable {
    public var host: String
    public var mode: String
    /// `connecting`, `connected`, `reconnecting`, `closed`, `stopped`.
    public var state: String
    public var servers: [String]
    /// Local events published (core) or stored by the stream (durable: acknowledged).
    public var exported: UInt64
    /// Events waiting to be published, and (durable) published but not yet acknowledged.
    public var exportQueued: Int
    public var exportInFlight: Int
    /// The estimated bytes of those exports — waiting, being published and (durable)
    /// unacknowledged — that `export_buffer_bytes` bounds.
    public var exportQueuedBytes: Int
    /// Remote events posted on the local bus.
    public var imported: UInt64
    /// Imports not yet posted: messages waiting in nats.c (core) or in the stream for this
    /// host's consumer (durable).
    public var importLag: UInt64
    /// This host's own events coming back, dropped.
    public var echoesDropped: UInt64
    /// Durable: redelivered messages already taken in, and copies of an event the stream
    /// stored twice (by its origin's sequence), dropped; duplicates the server dropped at publish
    /// (same message id).
    public var redeliveriesDropped: UInt64
    public var duplicatesDroppedByServer: UInt64
    /// Durable: events the stream stored behind a later event of the same origin and not taken
    /// in before (posted).
    public var outOfOrder: UInt64
    /// Durable: events the stream stored ahead of an earlier event of the same origin, held
    /// until that one came and posted in the origin's order (``OriginOrder``).
    public var reordered: UInt64 = 0
    /// Events known lost (counted in announced `bridge.gap` events, refused imports aside),
    /// and gap announcements.
    public var lost: UInt64
    public var gaps: UInt64
    public var disconnects: UInt64
    public var reconnects: UInt64
    /// Imports refused: subjects and payloads that do not decode or break the rules of a
    /// local post (``ImportRules``); each is announced too (`bridge.gap`, `import_refused`).
    public var malformed: UInt64
    /// Durable: last origin (instance, sequence) taken in per host.
    public var origins: [String: (instance: UInt64, sequence: UInt64)]
    public var lastError: String?
    /// Durable: events posted on the bus whose position is not yet in the position file — what
    /// a SIGKILL now would post again after the restart (0 once the batch's write is done).
    public var importUnrecorded: UInt64 = 0
    /// Durable: exports published again, in order, after the connection broke or an
    /// acknowledgement failed (what the stream had stored comes back as a server-dropped duplicate).
    public var exportRepublished: UInt64 = 0
    /// Durable: consumers made again because they delivered nothing for a while although they
    /// said messages were pending, or although the stream's leader held messages for them (a
    /// consumer on a server whose copy of the stream fell behind; docs/fleet-durability.md, Resume).
    public var consumersRemade: UInt64 = 0
    /// Core: other hosts' exports that never reached this host, counted by their numbers
    /// (announced as `bridge.gap` of kind `missed`, and counted in ``lost`` too).
    public var missed: UInt64 = 0
    /// Core: imports dropped because their origin sent more than its share while others waited
    /// (announced as `bridge.gap` of kind `over_share`, counted in ``lost`` too), by origin host;
    /// "" gathers the origins past the first ``OverShareCounts/namedLimit`` named.
    public var overShare: [String: UInt64] = [:]
}

/// Imports dropped over their origin's share, by origin. A host name in a subject is whatever
/// its publisher wrote: at most ``namedLimit`` are named, so a flood of made-up names cannot grow
/// the status answer and the metrics without bound.
struct OverShareCounts {
    static let namedLimit = 16
    private(set) var byOrigin: [String: UInt64] = [:]

    mutating func add(_ count: Int, of origin: String?) {
        var key = origin ?? ""
        if byOrigin[key] == nil, byOrigin.keys.count(where: { !$0.isEmpty }) >= Self.namedLimit { key = "" }
        byOrigin[key, default: 0] += UInt64(count)
    }
}

/// The bridge's counters, bumped from the threads that do the work (the bus delivery loop, the
/// exporter thread, nats.c's threads) without a lock.
final class BridgeCounters: Sendable {
    let exported = Atomic<UInt64>(0)
    let imported = Atomic<UInt64>(0)
    let echoesDropped = Atomic<UInt64>(0)
    let redeliveriesDropped = Atomic<UInt64>(0)
    let duplicatesDroppedByServer = Atomic<UInt64>(0)
    let outOfOrder = Atomic<UInt64>(0)
    let reordered = Atomic<UInt64>(0)
    let lost = Atomic<UInt64>(0)
    let gaps = Atomic<UInt64>(0)
    let disconnects = Atomic<UInt64>(0)
    let reconnects = Atomic<UInt64>(0)
    let malformed = Atomic<UInt64>(0)
    let inFlight = Atomic<Int>(0)
    let importLag = Atomic<UInt64>(0)
    let importUnrecorded = Atomic<UInt64>(0)
    let republished = Atomic<UInt64>(0)
    let consumersRemade = Atomic<UInt64>(0)
    let missed = Atomic<UInt64>(0)

}
