@_spi(EventBusHost) import EventBusKit
import Foundation

/// A `bridge.gap` event: events that should have crossed between this host and NATS and did
/// not, or may not have. Core NATS is at-most-once: its losses cannot be prevented, only counted
/// and said. Posted on the local bus (never exported), so modules and `eventbus tail` see it.
///
/// Fields: `kind`; `dropped` when the count is known; `subjects` (the subjects or event names
/// concerned, comma-separated, at most 16); `from` and `until` (dates: the time range);
/// `bridge_host` (this host); `origin_host` (`missed`, `over_share`: the host whose exports
/// were lost).
public struct BridgeGap: Sendable, Hashable {
    public static let eventName = "bridge.gap"

    public enum Kind: String, Sendable, Hashable {
        /// Core mode: the connection was down from `from` to `until`; events other hosts
        /// published meanwhile did not reach this host (how many, core NATS cannot tell).
        case disconnected
        /// Core mode: nats.c's reconnect buffer was full; these exports were lost.
        case reconnectBuffer = "reconnect_buffer"
        /// Core mode: this host did not take imports in fast enough and nats.c dropped them.
        case slowConsumer = "slow_consumer"
        /// The export buffer was full (NATS slow or, in durable mode, unreachable).
        case exportOverflow = "export_overflow"
        /// Durable mode: the stream had already discarded events past this host's position
        /// (its limits), while the host was away.
        case streamExpired = "stream_expired"
        /// An export nats.c or the server refused (too large, a closed connection).
        case publishFailed = "publish_failed"
        /// Core mode: the connection broke (a server that hung, its write deadline passed) while
        /// exports nats.c had taken were not yet confirmed by the server; some of them may be
        /// lost (how many, core NATS cannot tell: the log says at most how many).
        case exportUnconfirmed = "export_unconfirmed"
        /// Imports refused: a subject or payload a local post could not carry (a name with
        /// `*`, `>`, an empty token, whitespace or a control character; text that is not
        /// UTF-8) or that does not decode. Also counted as ``BridgeStatistics/malformed``;
        /// not counted as ``BridgeStatistics/lost`` (nothing a sender meant was lost).
        case importRefused = "import_refused"
        /// Core mode: exports of another host (`origin_host`) that never reached this one,
        /// counted by their numbers (``ReceivedNumbers``) when that host's next export of the
        /// same name arrived — lost while this host was disconnected, dropped by a server, or
        /// lost by the origin after its nats.c took them. Exact for what it counts; nats.c's
        /// own drops here are announced as `slow_consumer` instead, not twice.
        case missed
        /// Core mode: imports of one origin (`origin_host`) dropped because it sent more than its
        /// share of what this host takes in while others waited (``OriginShares``): the newest
        /// of the origin holding the most, once the subscription held `pending_limit` messages or
        /// `pending_bytes` bytes. Exact; other origins lose nothing to it.
        case overShare = "over_share"

        /// Whether the gap's count is the number of events lost; otherwise the announcement
        /// carries no `dropped` and ``BridgeStatistics/lost`` does not count it.
        public var countIsExact: Bool { self != .disconnected && self != .exportUnconfirmed }

        /// Whether its count adds to ``BridgeStatistics/lost``.
        var countsAsLost: Bool { countIsExact && self != .importRefused }
    }

    public var kind: Kind
    /// How many events were lost, when known.
    public var dropped: Int?
    public var subjects: [String]
    public var from: Date
    public var until: Date
    public var host: String
    /// `missed`, `over_share`: the host whose exports were lost (nil when more origins than a
    /// gap names per announcement lost exports at once, see ``GapBook/originLimit``, or past
    /// ``OriginShares/originLimit`` origins).
    public var origin: String?

    public init(kind: Kind, dropped: Int?, subjects: [String], from: Date, until: Date, host: String, origin: String? = nil) {
        self.kind = kind
        self.dropped = dropped
        self.subjects = subjects
        self.from = from
        self.until = until
        self.host = host
        self.origin = origin
    }

    /// Reads a `bridge.gap` event back.
    public init?(_ event: Event) {
        guard event.name == Self.eventName, event.origin == nil,
              let kind = event["kind"]?.stringValue.flatMap(Kind.init(rawValue:)),
              let from = event["from"]?.dateValue, let until = event["until"]?.dateValue
        else { return nil }
        self.kind = kind
        self.dropped = event["dropped"]?.intValue.map(Int.init)
        self.subjects = event["subjects"]?.stringValue.map { $0.split(separator: ",").map(String.init) } ?? []
        self.from = from
        self.until = until
        self.host = event["bridge_host"]?.stringValue ?? ""
        self.origin = event["origin_host"]?.stringValue
    }

    public var event: Event {
        var fields: [String: FieldValue] = [
            "kind": .string(kind.rawValue), "subjects": .string(subjects.joined(separator: ",")),
            "from": .date(from), "until": .date(until), "bridge_host": .string(host),
        ]
        if let dropped { fields["dropped"] = .int(Int64(dropped)) }
        if let origin { fields["origin_host"] = .string(origin) }
        return Event(name: Self.eventName, source: "bridge", fields: fields)
    }
}

/// Losses of one kind being collected until they are announced.
struct GapRecord {
    var kind: BridgeGap.Kind
    /// `missed`: whose exports.
    var origin: String?
    var count = 0
    var subjects: [String] = []
    var from: Date?
    var until: Date?

    init(kind: BridgeGap.Kind, origin: String? = nil) {
        self.kind = kind
        self.origin = origin
    }

    mutating func add(_ event: Event) {
        add(count: 1, subject: event.name, at: Date())
    }

    mutating func add(count: Int, subject: String, at time: Date) {
        self.count += count
        if subjects.count < 16 {
            let subject = Self.shortened(subject)
            if !subjects.contains(subject) { subjects.append(subject) }
        }
        if from == nil { from = time }
        until = time
    }

    /// The most UTF-8 bytes of one name or subject a gap keeps: a name can be as long as a
    /// request line (a megabyte), and a gap keeps sixteen of them per kind, in its record and
    /// in the announced event.
    static let subjectBytesLimit = 256

    /// `subject`, cut at ``subjectBytesLimit`` bytes (on a character boundary) and marked with "…".
    static func shortened(_ subject: String) -> String {
        guard subject.utf8.count > subjectBytesLimit else { return subject }
        var kept = ""
        for character in subject {
            guard kept.utf8.count + character.utf8.count <= subjectBytesLimit - 3 else { break }
            kept.append(character)
        }
        return kept + "…"
    }

    func gap(host: String) -> BridgeGap {
        BridgeGap(kind: kind, dropped: count, subjects: subjects, from: from ?? Date(), until: until ?? Date(), host: host, origin: origin)
    }
}

/// Losses recorded by whichever thread notices them (the bus loop, the exporter, nats.c's
/// threads), announced by the bridge's monitor queue every quarter second as one `bridge.gap`
/// per kind — so a storm of drops is a few announcements, not one per event.
final class GapBook: Sendable {
    /// One record per kind, and for `missed` one per origin.
    private struct Key: Hashable {
        var kind: BridgeGap.Kind
        var origin: String?
    }
    /// `Locked`, not `Mutex`: a flood records a drop per message from nats.c's delivery thread
    /// while the monitor takes them, and the thread sanitizer cannot see `Mutex`'s contended
    /// path (docs/design-notes.md, Locks).
    private let records = Locked<[Key: GapRecord]>([:])
    private let details = Locked<[BridgeGap.Kind: String]>([:])
    /// Origins a quarter second's `missed` announcements name one by one at most; the exports
    /// missed of any further origin are announced together, without an origin: anyone who may
    /// publish under the prefix can claim any host name, and must not make a storm of
    /// announcements.
    static let originLimit = 16

    func record(_ kind: BridgeGap.Kind, count: Int, subject: String, at time: Date = Date(), detail: String? = nil, origin: String? = nil) {
        records.withLock { records in
            var key = Key(kind: kind, origin: origin)
            if origin != nil, records[key] == nil, records.keys.count(where: { $0.kind == kind && $0.origin != nil }) >= Self.originLimit {
                key.origin = nil
            }
            records[key, default: GapRecord(kind: kind, origin: key.origin)].add(count: count, subject: subject, at: time)
        }
        if let detail { details.withLock { $0[kind] = detail } }
    }

    /// Records a gap whose range is known (a disconnect: from … until).
    func record(_ gap: GapRecord) {
        records.withLock { records in
            let key = Key(kind: gap.kind, origin: gap.origin)
            if var existing = records[key] {
                existing.count += gap.count
                for subject in gap.subjects.map(GapRecord.shortened) where existing.subjects.count < 16 && !existing.subjects.contains(subject) {
                    existing.subjects.append(subject)
                }
                existing.from = min(existing.from ?? gap.from ?? Date(), gap.from ?? Date())
                existing.until = max(existing.until ?? gap.until ?? Date(), gap.until ?? Date())
                records[key] = existing
            } else {
                var gap = gap
                gap.subjects = gap.subjects.prefix(16).map(GapRecord.shortened)
                records[key] = gap
            }
        }
    }

    /// Everything recorded since the last call, with the last detail text per kind.
    func take() -> [(GapRecord, String?)] {
        let taken = records.withLock { records in
            defer { records.removeAll() }
            return records
        }
        let texts = details.withLock { details in
            defer { details.removeAll() }
            return details
        }
        return taken.values.sorted { ($0.kind.rawValue, $0.origin ?? "") < ($1.kind.rawValue, $1.origin ?? "") }.map { ($0, texts[$0.kind]) }
    }
}
