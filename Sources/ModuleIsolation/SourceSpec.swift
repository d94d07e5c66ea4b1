import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation

/// A shared source's options as they cross from a worker to the host: the kind and the options'
/// `Codable` form, so the host rebuilds the very same options — same description, same source
/// id — and a module in a worker shares the host's one timer, kernel watch or journal reader
/// with everyone else who asks for the same.
///
/// Every kind the host registered with its options type (every kind of its source registry, and
/// timers) can be forwarded. A request of another kind (a source type a module made up itself
/// with ``SourceRequest``) has no options the host could rebuild: the worker refuses it with a
/// log line naming it (see ``encode(_:)``).
public struct SourceSpec: Codable, Equatable, Sendable {
    /// The options' kind (``SourceOptions/kind``).
    public var kind: String
    /// The options' `Codable` form as Foundation's `JSONEncoder` writes it: the host's registry
    /// reads it back with `JSONDecoder` (``Bus/decodeSourceOptions(kind:from:)``), so options
    /// holding a `Date`, `URL` or `TimeZone` cross as Foundation spells them.
    public var options: JSON

    public init(kind: String, options: JSON) {
        self.kind = kind
        self.options = options
    }

    /// The JSON for `request`, or nil when its kind cannot be forwarded.
    public static func encode(_ request: SourceRequest) -> JSON? {
        guard let options = request.options as? any (SourceOptions & Encodable),
              let data = try? JSONEncoder().encode(options), let encoded = try? JSON.parse(String(decoding: data, as: UTF8.self))
        else { return nil }
        return try? JSON(encoding: SourceSpec(kind: type(of: options).kind, options: encoded))
    }

    /// Opens on `bus` the publisher the worker asked for: `patterns` of the source `spec` names.
    public static func publisher(on bus: Bus, patterns: [EventPattern], spec: JSON) throws -> EventPublisher {
        let source: SourceSpec
        do {
            source = try spec.decode()
        } catch {
            throw WireError(error.reading("a source spec"))
        }
        let decoded = try bus.decodeSourceOptions(kind: source.kind, from: Data(JSONWriter.line(source.options)))
        return try bus.publisher(for: patterns, from: decoded)
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
