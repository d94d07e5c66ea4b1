import EventBusKit
import EventSources
import Foundation
import Synchronization

/// Events posted on the bus, by the kind of source that posted them, and the notices among them
/// that announce loss or trouble — counted by one closure subscription to every event.
///
/// Origin-aware: an event imported through the NATS bridge (it carries `@origin.host`) is
/// counted under the kind `imported`, whatever source the remote host claims for it, and a
/// notice among imports (another host's `module.crashed`, or a forged one) under
/// ``importedNoticesByName`` — never as this host's: an alert on `eventbus_notices_total`
/// means trouble here.
///
/// Why a subscription: the bus counts posts but not by source; its delivery loop is the one
/// place every event passes. The count is a few string comparisons, two relaxed atomic
/// stores and (for an event of three fields or more) a look for `@origin.host` per event,
/// on the loop, with no lock. Labels stay bounded: the kind is one of
/// ``kinds`` (a source's events carry its id, `<kind>:…`, for every kind of ``SourceKinds``;
/// events modules post carry the module's name, counted as `module`), never the event's own name.
public final class PostCounts: @unchecked Sendable {
    // @unchecked: `subscription` is guarded by `lock`; the counts are atomics.
    /// The kinds that are not sources, at fixed indices (``kind(of:)``), then every source kind.
    static let kinds = ["user", "module", "bridge", "eventbusd", "bus", "imported", "rules"] + SourceKinds.names
    /// The index of `imported` in ``kinds``.
    static let importedKind = 5
    /// Events whose only job is to say something was lost or went wrong: the host's own and
    /// every source kind's.
    static let notices = ["bridge.gap", "module.crashed", "module.failed", "rule.skipped", "action.failed"]
        + SourceKinds.all.flatMap { $0.notices }
    /// Per first byte of a source id, the source kinds whose ids start with it: `(prefix
    /// "files:", index)`. A few comparisons per event, whatever the number of kinds.
    private static let sourcePrefixes: [[(prefix: String, index: Int)]] = {
        var table = Array(repeating: [(prefix: String, index: Int)](), count: 256)
        for (index, kind) in kinds.enumerated() where index >= 7 {
            table[Int(kind.utf8.first!)].append((kind + ":", index))
        }
        return table
    }()

    private let posted: [Count]
    private let noticed: [Count]
    private let importedNoticed: [Count]
    private let lock = NSLock()
    private var subscription: AnyCancellable?

    public init() {
        posted = Self.kinds.map { _ in Count() }
        noticed = Self.notices.map { _ in Count() }
        importedNoticed = Self.notices.map { _ in Count() }
    }

    /// Starts counting what `bus` delivers from now on.
    public func start(on bus: Bus) {
        let cancellable = bus.publisher(for: try! EventPattern(">")).sink { [self] event in count(event) }
        lock.withLock { subscription = cancellable }
    }

    public func stop() {
        lock.withLock { subscription = nil }
    }

    public var postedByKind: [(kind: String, count: UInt64)] {
        zip(Self.kinds, posted).map { ($0, $1.value.load(ordering: .relaxed)) }
    }

    /// This host's own notices.
    var noticesByName: [(name: String, count: UInt64)] {
        zip(Self.notices, noticed).map { ($0, $1.value.load(ordering: .relaxed)) }
    }

    /// Notices imported from other hosts (as they claim them).
    var importedNoticesByName: [(name: String, count: UInt64)] {
        zip(Self.notices, importedNoticed).map { ($0, $1.value.load(ordering: .relaxed)) }
    }

    /// On the bus's delivery loop.
    private func count(_ event: Event) {
        let imported = Self.isImported(event.fields)
        posted[imported ? Self.importedKind : Self.kind(of: event.source)].bump()
        if let notice = Self.notice(named: event.name) { (imported ? importedNoticed : noticed)[notice].bump() }
    }

    /// The index of `name` in ``notices``; nil for any other name. By the last byte and the
    /// length first, so most posts are told apart without comparing strings (this runs on the
    /// delivery loop for every event).
    static func notice(named name: String) -> Int? {
        guard let last = name.utf8.last else { return nil }
        let length = name.utf8.count
        for candidate in noticesByLastByte[Int(last)] where candidate.length == length && candidate.name == name {
            return candidate.index
        }
        return nil
    }

    /// ``notices`` by their last byte.
    private static let noticesByLastByte: [[(name: String, length: Int, index: Int)]] = {
        var table = Array(repeating: [(name: String, length: Int, index: Int)](), count: 256)
        for (index, name) in notices.enumerated() { table[Int(name.utf8.last!)].append((name, name.utf8.count, index)) }
        return table
    }()

    /// Whether `fields` carry `@origin.host`. An import carries three origin fields, so most
    /// local events (fewer fields) are told apart by their count; among a few fields, the keys
    /// are compared (a key that starts with `@` first), which costs less than hashing the name
    /// for a lookup — this runs for every event posted.
    static func isImported(_ fields: [String: FieldValue]) -> Bool {
        guard fields.count >= 3 else { return false }
        guard fields.count <= 8 else { return fields[EventOrigin.hostField] != nil }
        for key in fields.keys where key.utf8.first == UInt8(ascii: "@") && key == EventOrigin.hostField { return true }
        return false
    }

    /// One counter, written by the delivery loop only (one event at a time), so a relaxed load
    /// and store need no read-modify-write; read by scrapes.
    private final class Count: Sendable {
        let value = Atomic<UInt64>(0)
        @inline(__always) func bump() { value.store(value.load(ordering: .relaxed) &+ 1, ordering: .relaxed) }
    }

    /// The index in ``kinds`` of a source id.
    static func kind(of source: String) -> Int {
        guard let first = source.utf8.first else { return 1 }
        switch first {
        case UInt8(ascii: "u") where source == "user": return 0
        case UInt8(ascii: "b") where source == "bridge": return 2
        case UInt8(ascii: "e") where source == "eventbusd": return 3
        case UInt8(ascii: "b") where source == "bus": return 4
        // The rules' records (`rules`) and their derived events (`rule:NAME`).
        case UInt8(ascii: "r") where source == "rules" || source.hasPrefix("rule:"): return 6
        default:
            for candidate in sourcePrefixes[Int(first)] where source.hasPrefix(candidate.prefix) { return candidate.index }
            return 1
        }
    }
}
