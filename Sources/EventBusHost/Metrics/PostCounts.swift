import EventBusKit
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
/// ``kinds`` (sources are named `timer:…`, `files:…`, `journal:…`, `devices:…`, `units:…`; events modules post carry
/// the module's name, counted as `module`), never the event's own name.
public final class PostCounts: @unchecked Sendable {
    // @unchecked: `subscription` is guarded by `lock`; the counts are atomics.
    static let kinds = ["user", "timer", "files", "journal", "bridge", "module", "eventbusd", "bus", "imported", "devices", "units", "rules"]
    /// The index of `imported` in ``kinds``.
    static let importedKind = 8
    /// Events whose only job is to say something was lost or went wrong.
    static let notices = ["journal.gap", "bridge.gap", "fs.overflow", "fs.rescanned", "fs.error", "module.crashed", "module.failed", "devices.gap", "devices.error", "units.gap", "rule.skipped", "action.failed"]

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

    /// The index of `name` in ``notices``; nil for any other name. By the last byte first: every
    /// notice name ends in `p`, `w`, `d` or `r`, so most posts are told apart without comparing
    /// strings (this runs on the delivery loop for every event).
    static func notice(named name: String) -> Int? {
        switch name.utf8.last {
        case UInt8(ascii: "p"), UInt8(ascii: "w"), UInt8(ascii: "d"), UInt8(ascii: "r"): break
        default: return nil
        }
        return switch name {
        case "journal.gap": 0
        case "bridge.gap": 1
        case "fs.overflow": 2
        case "fs.rescanned": 3
        case "fs.error": 4
        case "module.crashed": 5
        case "module.failed": 6
        case "devices.gap": 7
        case "devices.error": 8
        case "units.gap": 9
        case "rule.skipped": 10
        case "action.failed": 11
        default: nil
        }
    }

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
        switch source.utf8.first {
        case UInt8(ascii: "u") where source == "user": return 0
        case UInt8(ascii: "t") where source.hasPrefix("timer:"): return 1
        case UInt8(ascii: "f") where source.hasPrefix("files:"): return 2
        case UInt8(ascii: "j") where source.hasPrefix("journal:"): return 3
        case UInt8(ascii: "b") where source == "bridge": return 4
        case UInt8(ascii: "e") where source == "eventbusd": return 6
        case UInt8(ascii: "b") where source == "bus": return 7
        case UInt8(ascii: "d") where source.hasPrefix("devices:"): return 9
        case UInt8(ascii: "u") where source.hasPrefix("units:"): return 10
        // The rules' records (`rules`) and their derived events (`rule:NAME`).
        case UInt8(ascii: "r") where source == "rules" || source.hasPrefix("rule:"): return 11
        default: return 5
        }
    }
}
