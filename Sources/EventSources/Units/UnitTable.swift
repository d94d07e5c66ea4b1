import EventBusKit
import SystemdBus

/// What one connection knows of the manager's loaded units, and the rules that turn systemd's
/// signals into transitions: pure state, no D-Bus, so the rules are tested without the OS.
///
/// Per unit it keeps the state as last announced and the state as last heard. systemd sends a
/// unit's changes as two PropertiesChanged signals, its type's interface first (Service:
/// `Result`, `ExecMainCode`…), then `org.freedesktop.systemd1.Unit` (`ActiveState`,
/// `SubState`…); the second decides: a transition is a new (ActiveState, SubState) pair, and
/// it carries what the first one said. Signals that repeat the states (a restart sends 14 for
/// a handful of transitions) announce nothing.
///
/// Used on its connection's thread only.
struct UnitTable {
    struct Record: Equatable {
        /// As last heard (signals, listings).
        var current: UnitState
        /// As last announced (a transition, a snapshot, a resync).
        var announced: UnitState
        var changedAtMicroseconds: UInt64?
        var changedAtMonotonicMicroseconds: UInt64?
        /// Removed (`UnitRemoved`) while not inactive: until it is heard of again.
        var unloaded = false
    }

    /// A unit as `ListUnits` lists it.
    struct Listed: Equatable {
        var activeState: String
        var subState: String
        var loadState: String
    }

    private(set) var records: [String: Record] = [:]

    /// The properties of a unit's type-specific interface: kept for its next transition.
    mutating func applyTypeProperties(unit: String, _ properties: [String: PropertyValue]) {
        var record = records[unit] ?? Record(current: .unloaded, announced: .unloaded)
        record.unloaded = false
        if let result = properties["Result"]?.string { record.current.result = result }
        if let code = properties["ExecMainCode"]?.integer { record.current.execMainCode = code }
        if let status = properties["ExecMainStatus"]?.integer { record.current.execMainStatus = status }
        records[unit] = record
    }

    /// The properties of `org.freedesktop.systemd1.Unit`: the transition they make, if any, as
    /// announced — unless `announce` is false (while a listing is under way, which will
    /// report the unit's state itself).
    mutating func applyUnitProperties(unit: String, _ properties: [String: PropertyValue], announce: Bool = true) -> UnitStateChange? {
        var record = records[unit] ?? Record(current: .unloaded, announced: .unloaded)
        record.unloaded = false
        if let active = properties["ActiveState"]?.string { record.current.activeState = active }
        if let sub = properties["SubState"]?.string { record.current.subState = sub }
        if let load = properties["LoadState"]?.string { record.current.loadState = load }
        if let invocation = properties["InvocationID"] { record.current.invocationID = invocation.hex }
        if let realtime = properties["StateChangeTimestamp"]?.unsigned { record.changedAtMicroseconds = realtime == 0 ? nil : realtime }
        if let monotonic = properties["StateChangeTimestampMonotonic"]?.unsigned {
            record.changedAtMonotonicMicroseconds = monotonic == 0 ? nil : monotonic
        }
        var change: UnitStateChange?
        if announce, record.announced.isTransition(to: record.current) {
            change = UnitStateChange(unit: unit, origin: .change, old: record.announced, new: record.current,
                                     changedAtMicroseconds: record.changedAtMicroseconds,
                                     changedAtMonotonicMicroseconds: record.changedAtMonotonicMicroseconds)
            record.announced = record.current
        }
        records[unit] = record
        return change
    }

    /// `UnitRemoved`: systemd unloaded the unit. Nothing to announce. An inactive unit nothing
    /// refers to is forgotten (if it is loaded again, it starts from ``UnitState/unloaded``,
    /// the same state). Any other is kept, marked unloaded: `daemon-reload` and
    /// `daemon-reexec` remove every unit and load them again, and the states they come back
    /// with must be compared with the ones announced before, not with `inactive`.
    mutating func remove(unit: String) {
        guard var record = records[unit] else { return }
        if record.announced.isTransition(to: .unloaded) {
            record.unloaded = true
            records[unit] = record
        } else {
            records[unit] = nil
        }
    }

    /// Takes a full listing as the truth: each unit whose announced state differs from it is a
    /// change with origin `resync` (a unit no longer listed went to ``UnitState/unloaded``; a
    /// unit listed for the first time came from it). Returns them sorted by unit name.
    mutating func resync(with listing: [String: Listed]) -> [UnitStateChange] {
        var changes: [UnitStateChange] = []
        for (unit, record) in records where listing[unit] == nil {
            if record.announced.isTransition(to: .unloaded) {
                changes.append(UnitStateChange(unit: unit, origin: .resync, old: record.announced, new: .unloaded))
            }
            records[unit] = nil
        }
        for (unit, listed) in listing {
            var record = records[unit] ?? Record(current: .unloaded, announced: .unloaded)
            record.unloaded = false
            record.current.activeState = listed.activeState
            record.current.subState = listed.subState
            record.current.loadState = listed.loadState
            if record.announced.isTransition(to: record.current) {
                changes.append(UnitStateChange(unit: unit, origin: .resync, old: record.announced, new: record.current,
                                               changedAtMicroseconds: record.changedAtMicroseconds,
                                               changedAtMonotonicMicroseconds: record.changedAtMonotonicMicroseconds))
            }
            record.announced = record.current
            records[unit] = record
        }
        return changes.sorted { $0.unit < $1.unit }
    }

    /// The announced state of every loaded unit `match` selects, sorted by name, as snapshot events.
    func snapshot(matching match: UnitMatch) -> [UnitStateChange] {
        records.filter { !$0.value.unloaded && match.matches($0.key) }.keys.sorted().map { unit in
            let record = records[unit]!
            return UnitStateChange(unit: unit, origin: .snapshot, old: nil, new: record.announced,
                                   changedAtMicroseconds: record.changedAtMicroseconds,
                                   changedAtMonotonicMicroseconds: record.changedAtMonotonicMicroseconds)
        }
    }
}
