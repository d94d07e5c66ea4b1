import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What a units source follows: the options of the shared `units` source kind.
///
/// Equal watches share one source; every watch of one ``UnitManager`` shares the host's one
/// D-Bus connection to that manager (one `Subscribe`, one set of signal matches). The
/// ``description`` is part of the source id, so it is canonical (patterns sorted, no duplicates).
public struct UnitWatch: SourceOptions {
    public static let kind = "units"

    /// Which units: name patterns as `systemctl list-units PATTERN` takes them (`*`, `?`, `[…]`).
    public var match: UnitMatch
    /// Which service manager.
    public var manager: UnitManager

    public init(match: UnitMatch = .all, manager: UnitManager = .system) {
        self.match = match
        self.manager = manager
    }

    public var description: String {
        "match=\(match) manager=\(manager)"
    }

    /// Throws ``EventBusError/Code/invalidUnitWatch`` for what no unit can match or no bus can
    /// be reached at: an empty pattern, characters no unit name has, an address without a transport.
    public func validate() throws {
        if match.patterns.isEmpty {
            throw EventBusError(.invalidUnitWatch, "a unit watch needs at least one name pattern (\"*\" for every unit)")
        }
        for pattern in match.patterns {
            if let problem = UnitMatch.problem(with: pattern) {
                throw EventBusError(.invalidUnitWatch, "unit pattern \"\(pattern)\": \(problem)")
            }
        }
        if case .address(let address) = manager, !address.contains(":") || address.hasPrefix(":") {
            throw EventBusError(.invalidUnitWatch,
                "\"\(address)\" is not a D-Bus address (expected e.g. unix:path=/run/systemd/private)")
        }
    }
}

/// Which units a watch follows: glob patterns on unit names, any of which may match.
public struct UnitMatch: Sendable, Hashable, CustomStringConvertible {
    /// Sorted, without duplicates.
    public let patterns: [String]

    public init(_ patterns: [String]) {
        self.patterns = Array(Set(patterns)).sorted()
    }

    /// Every unit.
    public static let all = UnitMatch(["*"])

    /// Units whose names match any of `patterns` (`nginx.service`, `app-*.service`, `*.timer`).
    public static func names(_ patterns: String...) -> UnitMatch { UnitMatch(patterns) }

    /// Units of these types (`service`, `socket`, `timer`, …): `*.service` and so on.
    public static func types(_ types: String...) -> UnitMatch { UnitMatch(types.map { "*.\($0)" }) }

    /// Whether `unit` matches one of the patterns (fnmatch(3) without escapes, as systemctl
    /// matches its patterns).
    public func matches(_ unit: String) -> Bool {
        patterns.contains { fnmatch($0, unit, FNM_NOESCAPE) == 0 }
    }

    public var description: String { patterns.joined(separator: ",") }

    /// Unit names are ASCII letters, digits and `:-_.\@`; a pattern adds `*?[]!^`.
    static func problem(with pattern: String) -> String? {
        if pattern.isEmpty { return "empty" }
        if pattern.utf8.count > 256 { return "longer than a unit name can be (256)" }
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_.\\@*?[]!^")
        if let bad = pattern.first(where: { !allowed.contains($0) }) {
            return "'\(bad)' occurs in no unit name"
        }
        return nil
    }
}

/// Which service manager a units watch follows.
public enum UnitManager: Sendable, Hashable, CustomStringConvertible {
    /// The system manager (PID 1): its private socket `/run/systemd/private` when the host runs
    /// as root (no dbus-daemon in the path), the system bus otherwise.
    case system
    /// The calling user's manager (`systemctl --user`): its private socket under
    /// `$XDG_RUNTIME_DIR/systemd/private`, the user bus otherwise.
    case user
    /// A manager at this D-Bus address (`unix:path=/run/systemd/private`): a private socket
    /// is spoken to directly, anything else as a bus.
    case address(String)

    public var description: String {
        switch self {
        case .system: "system"
        case .user: "user"
        case .address(let address): "address:\(address)"
        }
    }
}

extension Bus {
    /// `unit.state` and `unit.job` events for the units `match` selects, with the watch's
    /// `units.gap` and `units.synced` notices. Starts with the current state of every matching
    /// unit (`origin: snapshot`), then each transition once, in order. Subscriptions with equal
    /// options share one source; every watch of a manager shares one D-Bus connection.
    ///
    /// Throws ``EventBusError/Code/invalidUnitWatch`` for malformed options and
    /// ``EventBusError/Code/sourceUnavailable`` on a bus without the host's units driver.
    public func units(matching match: UnitMatch = .all, manager: UnitManager = .system) throws -> EventPublisher {
        try units(UnitWatch(match: match, manager: manager))
    }

    /// Like ``units(matching:manager:)``, with the options as one value.
    public func units(_ watch: UnitWatch) throws -> EventPublisher {
        try watch.validate()
        return try publisher(for: UnitWatch.allEvents, from: watch)
    }
}

extension UnitWatch {
    /// Every event a units source posts: `unit.state`, `unit.job`, `units.gap`, `units.synced`.
    static let allEvents = [try! EventPattern("unit.*"), try! EventPattern("units.*")]
}
