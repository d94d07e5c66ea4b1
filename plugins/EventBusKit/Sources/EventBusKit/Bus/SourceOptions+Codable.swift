import Foundation

// The built-in sources' options as data: how a module in a worker process asks the host for the
// very same source (same description, so the same source id and the one shared timer, kernel
// watch or journal reader). Decoding goes through each type's validating initializer, so options
// that arrive from another process are checked exactly as a module's own would be.

extension TimerSchedule: Codable {
    private enum CodingKeys: String, CodingKey {
        case everyNanoseconds = "every_ns", calendar, zone, toleranceNanoseconds = "tolerance_ns", missed, name
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch kind {
        case .interval(let nanoseconds): try container.encode(nanoseconds, forKey: .everyNanoseconds)
        case .calendar(let calendar):
            try container.encode(calendar.description, forKey: .calendar)
            try container.encode(calendar.timeZone.identifier, forKey: .zone)
        }
        try container.encode(tolerance.clampedNanoseconds, forKey: .toleranceNanoseconds)
        try container.encode(missedRuns.rawValue, forKey: .missed)
        try container.encodeIfPresent(name, forKey: .name)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let tolerance = Duration.nanoseconds(try container.decode(Int64.self, forKey: .toleranceNanoseconds))
        let missedText = try container.decode(String.self, forKey: .missed)
        guard let missed = MissedRunPolicy(rawValue: missedText) else {
            throw DecodingError.dataCorruptedError(forKey: .missed, in: container, debugDescription: "no missed-run policy \(missedText)")
        }
        var schedule: TimerSchedule
        if let every = try container.decodeIfPresent(UInt64.self, forKey: .everyNanoseconds) {
            schedule = try .every(.nanoseconds(Int64(clamping: every)), tolerance: tolerance, missedRuns: missed)
        } else {
            let zoneName = try container.decode(String.self, forKey: .zone)
            guard let zone = TimeZone(identifier: zoneName) else {
                throw DecodingError.dataCorruptedError(forKey: .zone, in: container, debugDescription: "unknown time zone \(zoneName)")
            }
            schedule = try .calendar(try container.decode(String.self, forKey: .calendar), timeZone: zone,
                                     tolerance: tolerance, missedRuns: missed)
        }
        if let name = try container.decodeIfPresent(String.self, forKey: .name) { schedule = schedule.named(name) }
        self = schedule
    }
}

extension FileWatch: Codable {
    private enum CodingKeys: String, CodingKey { case path, recursive, rearm, entryLimit = "entry_limit" }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(path, forKey: .path)
        try container.encode(recursive, forKey: .recursive)
        try container.encode(rearmWhenRecreated, forKey: .rearm)
        try container.encodeIfPresent(entryLimit, forKey: .entryLimit)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        try self.init(path: try container.decode(String.self, forKey: .path),
                      recursive: try container.decodeIfPresent(Bool.self, forKey: .recursive) ?? false,
                      rearmWhenRecreated: try container.decodeIfPresent(Bool.self, forKey: .rearm) ?? false,
                      entryLimit: try container.decodeIfPresent(Int.self, forKey: .entryLimit))
    }
}

extension JournalWatch: Codable {
    private enum CodingKeys: String, CodingKey {
        case terms, directory, namespace, start, since, afterCursor = "after_cursor", consumer
        case allFields = "fields_all", extraFields = "fields_extra"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(match.terms.map { $0.fields.mapValues { $0.sorted() } }, forKey: .terms)
        switch location {
        case .system: break
        case .directory(let path): try container.encode(path, forKey: .directory)
        case .namespace(let name): try container.encode(name, forKey: .namespace)
        }
        switch start {
        case .tail: try container.encode("tail", forKey: .start)
        case .head: try container.encode("head", forKey: .start)
        case .since(let date): try container.encode(date.timeIntervalSince1970, forKey: .since)
        case .afterCursor(let cursor): try container.encode(cursor, forKey: .afterCursor)
        }
        try container.encodeIfPresent(consumer, forKey: .consumer)
        try container.encode(fields.all, forKey: .allFields)
        try container.encode(fields.extra.sorted(), forKey: .extraFields)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        var watch = JournalWatch()
        let terms = try container.decodeIfPresent([[String: [String]]].self, forKey: .terms) ?? []
        watch.match = JournalMatch(terms: terms.map { $0.mapValues(Set.init) })
        if let directory = try container.decodeIfPresent(String.self, forKey: .directory) {
            watch.location = .directory(directory)
        } else if let namespace = try container.decodeIfPresent(String.self, forKey: .namespace) {
            watch.location = .namespace(namespace)
        }
        if let since = try container.decodeIfPresent(Double.self, forKey: .since) {
            watch.start = .since(Date(timeIntervalSince1970: since))
        } else if let cursor = try container.decodeIfPresent(String.self, forKey: .afterCursor) {
            watch.start = .afterCursor(cursor)
        } else if try container.decodeIfPresent(String.self, forKey: .start) == "head" {
            watch.start = .head
        }
        watch.consumer = try container.decodeIfPresent(String.self, forKey: .consumer)
        let extra = Set(try container.decodeIfPresent([String].self, forKey: .extraFields) ?? [])
        let all = try container.decodeIfPresent(Bool.self, forKey: .allFields) ?? false
        watch.fields = all ? .everything : extra.isEmpty ? .standard : .standard(plus: extra)
        try watch.validate()
        self = watch
    }
}

extension DeviceWatch: Codable {
    private enum CodingKeys: String, CodingKey { case subsystem, devtype, tag, layer }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(subsystem, forKey: .subsystem)
        try container.encodeIfPresent(devtype, forKey: .devtype)
        try container.encodeIfPresent(tag, forKey: .tag)
        try container.encode(layer.rawValue, forKey: .layer)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let layerText = try container.decodeIfPresent(String.self, forKey: .layer) ?? DeviceLayerChoice.automatic.rawValue
        guard let layer = DeviceLayerChoice(rawValue: layerText) else {
            throw DecodingError.dataCorruptedError(forKey: .layer, in: container, debugDescription: "no device layer \(layerText)")
        }
        self.init(subsystem: try container.decodeIfPresent(String.self, forKey: .subsystem),
                  devtype: try container.decodeIfPresent(String.self, forKey: .devtype),
                  tag: try container.decodeIfPresent(String.self, forKey: .tag), layer: layer)
        try validate()
    }
}

extension UnitWatch: Codable {
    private enum CodingKeys: String, CodingKey { case patterns, manager }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(match.patterns, forKey: .patterns)
        try container.encode(manager.description, forKey: .manager)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let manager: UnitManager
        switch try container.decode(String.self, forKey: .manager) {
        case "system": manager = .system
        case "user": manager = .user
        case let text where text.hasPrefix("address:"): manager = .address(String(text.dropFirst("address:".count)))
        case let text: throw DecodingError.dataCorruptedError(forKey: .manager, in: container, debugDescription: "no unit manager \(text)")
        }
        self.init(match: UnitMatch(try container.decode([String].self, forKey: .patterns)), manager: manager)
        try validate()
    }
}
