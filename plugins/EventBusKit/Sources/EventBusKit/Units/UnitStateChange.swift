import Foundation

/// A unit's state as systemd reports it on D-Bus (`systemctl show` prints the same properties).
public struct UnitState: Sendable, Hashable {
    /// `ActiveState`: active, reloading, inactive, failed, activating, deactivating, maintenance.
    public var activeState: String
    /// `SubState`: the type's finer state (running, exited, dead, auto-restart, listening…).
    public var subState: String
    /// `LoadState` (loaded, not-found, masked…), when known: the snapshot and resync list it;
    /// signals carry it only when it changes.
    public var loadState: String?
    /// `Result` of a service, socket, mount… (success, exit-code, signal, timeout, core-dump…).
    public var result: String?
    /// `ExecMainCode` of a service: how its main process ended, as waitid(2)'s `si_code`
    /// (1 exited, 2 killed, 3 dumped core); 0 while it runs or before it ran.
    public var execMainCode: Int?
    /// `ExecMainStatus` of a service: the exit status, or the signal number when killed.
    public var execMainStatus: Int?
    /// `InvocationID`: 32 hex digits, new with each start of the unit (journal field `_SYSTEMD_INVOCATION_ID`).
    public var invocationID: String?

    public init(activeState: String, subState: String, loadState: String? = nil, result: String? = nil,
                execMainCode: Int? = nil, execMainStatus: Int? = nil, invocationID: String? = nil) {
        self.activeState = activeState
        self.subState = subState
        self.loadState = loadState
        self.result = result
        self.execMainCode = execMainCode
        self.execMainStatus = execMainStatus
        self.invocationID = invocationID
    }

    /// What an unloaded unit is: systemd drops inactive units nothing refers to, and loads them
    /// again when asked for.
    public static let unloaded = UnitState(activeState: "inactive", subState: "dead")

    /// Whether going from `self` to `other` is a transition: the states differ. Everything else
    /// (a repeated signal, timestamps, a property of another kind) is not.
    public func isTransition(to other: UnitState) -> Bool {
        activeState != other.activeState || subState != other.subState
    }
}

/// A `unit.state` event: a unit's state, and the state it left when this is a transition.
public struct UnitStateChange: Sendable, Hashable {
    public static let eventName = "unit.state"

    /// Why the event was posted.
    public enum Origin: String, Sendable, Hashable {
        /// The state when the subscription (or its watch) started: no transition, ``old`` is nil.
        case snapshot
        /// A transition systemd announced.
        case change
        /// A difference found after a blind period (`units.gap`): the unit went from ``old`` to
        /// ``new`` while the source could not see, possibly through states between them.
        case resync
    }

    /// The unit's name (`nginx.service`).
    public var unit: String
    public var origin: Origin
    /// The state before (nil for a snapshot).
    public var old: UnitState?
    /// The state now.
    public var new: UnitState
    /// `StateChangeTimestamp`: when systemd made the change, microseconds since 1970 (nil when
    /// the unit never changed state in this boot, or the snapshot could not tell).
    public var changedAtMicroseconds: UInt64?
    /// `StateChangeTimestampMonotonic`: the same in `CLOCK_MONOTONIC` microseconds.
    public var changedAtMonotonicMicroseconds: UInt64?

    public init(unit: String, origin: Origin, old: UnitState?, new: UnitState,
                changedAtMicroseconds: UInt64? = nil, changedAtMonotonicMicroseconds: UInt64? = nil) {
        self.unit = unit
        self.origin = origin
        self.old = old
        self.new = new
        self.changedAtMicroseconds = changedAtMicroseconds
        self.changedAtMonotonicMicroseconds = changedAtMonotonicMicroseconds
    }

    /// Whether the unit is now `failed` (and was not before).
    public var failed: Bool { new.activeState == "failed" && old?.activeState != "failed" }

    public func event(source: String) -> Event {
        var fields: [String: FieldValue] = [
            "unit": .string(unit), "origin": .string(origin.rawValue),
            "active_state": .string(new.activeState), "sub_state": .string(new.subState),
        ]
        Self.put(new, prefix: "", into: &fields)
        if let old {
            fields["old_active_state"] = .string(old.activeState)
            fields["old_sub_state"] = .string(old.subState)
            Self.put(old, prefix: "old_", into: &fields)
        }
        if let changedAtMicroseconds { fields["changed_us"] = .int(Int64(clamping: changedAtMicroseconds)) }
        if let changedAtMonotonicMicroseconds { fields["changed_monotonic_us"] = .int(Int64(clamping: changedAtMonotonicMicroseconds)) }
        return Event(name: Self.eventName, source: source, fields: fields)
    }

    private static func put(_ state: UnitState, prefix: String, into fields: inout [String: FieldValue]) {
        if let value = state.loadState { fields[prefix + "load_state"] = .string(value) }
        if let value = state.result { fields[prefix + "result"] = .string(value) }
        if let value = state.execMainCode { fields[prefix + "exec_main_code"] = .int(Int64(value)) }
        if let value = state.execMainStatus { fields[prefix + "exec_main_status"] = .int(Int64(value)) }
        if let value = state.invocationID { fields[prefix + "invocation_id"] = .string(value) }
    }

    fileprivate static func state(in fields: [String: FieldValue], prefix: String) -> UnitState? {
        guard let active = fields[prefix + "active_state"]?.stringValue,
              let sub = fields[prefix + "sub_state"]?.stringValue else { return nil }
        return UnitState(activeState: active, subState: sub,
                         loadState: fields[prefix + "load_state"]?.stringValue,
                         result: fields[prefix + "result"]?.stringValue,
                         execMainCode: fields[prefix + "exec_main_code"]?.intValue.map { Int($0) },
                         execMainStatus: fields[prefix + "exec_main_status"]?.intValue.map { Int($0) },
                         invocationID: fields[prefix + "invocation_id"]?.stringValue)
    }
}

extension Event {
    /// The unit state this event carries, if it is a `unit.state` event.
    public var unitState: UnitStateChange? {
        guard name == UnitStateChange.eventName, let unit = fields["unit"]?.stringValue,
              let origin = fields["origin"]?.stringValue.flatMap(UnitStateChange.Origin.init(rawValue:)),
              let new = UnitStateChange.state(in: fields, prefix: "")
        else { return nil }
        return UnitStateChange(unit: unit, origin: origin, old: UnitStateChange.state(in: fields, prefix: "old_"), new: new,
                               changedAtMicroseconds: fields["changed_us"]?.intValue.map { UInt64(clamping: $0) },
                               changedAtMonotonicMicroseconds: fields["changed_monotonic_us"]?.intValue.map { UInt64(clamping: $0) })
    }
}
