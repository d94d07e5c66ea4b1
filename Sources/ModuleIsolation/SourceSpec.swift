import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation

/// A shared source's options as they cross from a worker to the host: the kind and its options
/// field by field, so the host rebuilds the very same options — same description, same source
/// id — and a module in a worker shares the host's one timer, kernel watch or journal reader
/// with everyone else who asks for the same.
///
/// Kinds: `timer`, `files`, `journal`, `devices` and `units`. A request of another kind (a source type a module made
/// up itself with ``SourceRequest``) has no options the host could rebuild: the worker refuses it
/// with a log line naming it (see ``encode(_:)``).
public enum SourceSpec {
    /// The JSON for `request`, or nil when its kind cannot be forwarded.
    public static func encode(_ request: SourceRequest) -> JSON? {
        switch request.options {
        case let schedule as TimerSchedule:
            var object: [String: JSON] = [
                "kind": "timer",
                "tolerance_ns": .int(schedule.tolerance.clampedNanoseconds),
                "missed": .string(schedule.missedRuns.rawValue),
            ]
            if let name = schedule.name { object["name"] = .string(name) }
            if let interval = schedule.intervalNanoseconds {
                object["every_ns"] = .int(Int64(clamping: interval))
            } else if let calendar = schedule.calendar {
                object["calendar"] = .string(calendar.description)
                object["zone"] = .string(calendar.timeZone.identifier)
            }
            return .object(object)
        case let watch as FileWatch:
            return .object(["kind": "files", "path": .string(watch.path),
                            "recursive": .bool(watch.recursive), "rearm": .bool(watch.rearmWhenRecreated)])
        case let watch as JournalWatch:
            var object: [String: JSON] = [
                "kind": "journal",
                "terms": .array(watch.match.terms.map { term in
                    .object(term.fields.mapValues { .array($0.sorted().map(JSON.string)) })
                }),
                "fields_all": .bool(watch.fields.all),
                "fields_extra": .array(watch.fields.extra.sorted().map(JSON.string)),
            ]
            switch watch.location {
            case .system: object["location"] = "system"
            case .directory(let path): object["directory"] = .string(path)
            case .namespace(let name): object["namespace"] = .string(name)
            }
            switch watch.start {
            case .tail: object["start"] = "tail"
            case .head: object["start"] = "head"
            case .since(let date): object["since"] = .double(date.timeIntervalSince1970)
            case .afterCursor(let cursor): object["after_cursor"] = .string(cursor)
            }
            if let consumer = watch.consumer { object["consumer"] = .string(consumer) }
            return .object(object)
        case let watch as DeviceWatch:
            var object: [String: JSON] = ["kind": "devices", "layer": .string(watch.layer.rawValue)]
            if let subsystem = watch.subsystem { object["subsystem"] = .string(subsystem) }
            if let devtype = watch.devtype { object["devtype"] = .string(devtype) }
            if let tag = watch.tag { object["tag"] = .string(tag) }
            return .object(object)
        case let watch as UnitWatch:
            return .object(["kind": "units", "patterns": .array(watch.match.patterns.map(JSON.string)),
                            "manager": .string(watch.manager.description)])
        default:
            return nil
        }
    }

    /// Opens on `bus` the publisher the worker asked for: `patterns` of the source `spec` names.
    public static func publisher(on bus: Bus, patterns: [EventPattern], spec: JSON) throws -> EventPublisher {
        func string(_ key: String) throws -> String {
            guard let value = spec[key]?.stringValue else { throw WireError("source spec without \(key)") }
            return value
        }
        switch spec["kind"]?.stringValue {
        case "timer":
            let tolerance = Duration.nanoseconds(spec["tolerance_ns"]?.intValue ?? 0)
            guard let missed = MissedRunPolicy(rawValue: try string("missed")) else { throw WireError("bad missed-run policy") }
            var schedule: TimerSchedule
            if let every = spec["every_ns"]?.intValue {
                schedule = try .every(.nanoseconds(every), tolerance: tolerance, missedRuns: missed)
            } else {
                guard let zone = TimeZone(identifier: try string("zone")) else { throw WireError("unknown time zone") }
                schedule = try .calendar(try string("calendar"), timeZone: zone, tolerance: tolerance, missedRuns: missed)
            }
            if let name = spec["name"]?.stringValue { schedule = schedule.named(name) }
            return try bus.publisher(for: patterns, from: schedule)
        case "files":
            let watch = try FileWatch(path: try string("path"), recursive: spec["recursive"]?.boolValue ?? false,
                                      rearmWhenRecreated: spec["rearm"]?.boolValue ?? false)
            return try bus.publisher(for: patterns, from: watch)
        case "journal":
            var watch = JournalWatch()
            let terms: [[String: Set<String>]] = (spec["terms"]?.arrayValue ?? []).map { term in
                (term.objectValue ?? [:]).mapValues { Set(($0.arrayValue ?? []).compactMap(\.stringValue)) }
            }
            watch.match = JournalMatch(terms: terms)
            if let directory = spec["directory"]?.stringValue {
                watch.location = .directory(directory)
            } else if let namespace = spec["namespace"]?.stringValue {
                watch.location = .namespace(namespace)
            }
            if let since = spec["since"]?.doubleValue {
                watch.start = .since(Date(timeIntervalSince1970: since))
            } else if let cursor = spec["after_cursor"]?.stringValue {
                watch.start = .afterCursor(cursor)
            } else if spec["start"]?.stringValue == "head" {
                watch.start = .head
            }
            watch.consumer = spec["consumer"]?.stringValue
            let extra = Set((spec["fields_extra"]?.arrayValue ?? []).compactMap(\.stringValue))
            watch.fields = spec["fields_all"]?.boolValue == true ? .everything : extra.isEmpty ? .standard : .standard(plus: extra)
            try watch.validate()
            return try bus.publisher(for: patterns, from: watch)
        case "devices":
            guard let layer = DeviceLayerChoice(rawValue: try string("layer")) else { throw WireError("bad device layer") }
            let watch = DeviceWatch(subsystem: spec["subsystem"]?.stringValue, devtype: spec["devtype"]?.stringValue,
                                    tag: spec["tag"]?.stringValue, layer: layer)
            try watch.validate()
            return try bus.publisher(for: patterns, from: watch)
        case "units":
            let unitPatterns = (spec["patterns"]?.arrayValue ?? []).compactMap(\.stringValue)
            let manager: UnitManager
            switch try string("manager") {
            case "system": manager = .system
            case "user": manager = .user
            case let text where text.hasPrefix("address:"): manager = .address(String(text.dropFirst("address:".count)))
            case let text: throw WireError("unknown unit manager \(text)")
            }
            let watch = UnitWatch(match: UnitMatch(unitPatterns), manager: manager)
            try watch.validate()
            return try bus.publisher(for: patterns, from: watch)
        case let kind:
            throw WireError("no source kind \(kind ?? "(none)") can be forwarded")
        }
    }
}

extension ConfigValue {
    /// As JSON, for the start and reconfigure frames.
    public var json: JSON {
        switch self {
        case .string(let value): return .string(value)
        case .int(let value): return .int(Int64(value))
        case .double(let value): return .double(value)
        case .bool(let value): return .bool(value)
        case .array(let items): return .array(items.map(\.json))
        case .table(let members): return .object(members.mapValues(\.json))
        }
    }

    /// Back from JSON; null (which a config cannot hold) reads as an empty string.
    public init(json: JSON) {
        switch json {
        case .null: self = .string("")
        case .bool(let value): self = .bool(value)
        case .int(let value): self = .int(Int(value))
        case .double(let value): self = .double(value)
        case .string(let value): self = .string(value)
        case .array(let items): self = .array(items.map(ConfigValue.init(json:)))
        case .object(let members): self = .table(members.mapValues(ConfigValue.init(json:)))
        }
    }
}

extension ModuleConfig {
    public var json: JSON { .object(values.mapValues(\.json)) }

    public init(json: JSON, keys: ModuleConfigKeys = .undeclared) {
        self.init([:], keys: keys)
        for (key, value) in json.objectValue ?? [:] { values[key] = ConfigValue(json: value) }
    }
}
