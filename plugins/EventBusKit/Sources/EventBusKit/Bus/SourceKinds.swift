import Foundation
/// Options of a kind of source whose implementation the host provides (file changes, journal).
///
/// Why a registry: module code asks for these sources through the SDK (`bus.files(at:)`), but
/// their implementations talk to the OS (inotify, libsystemd) and live in the host, outside
/// the SDK. The SDK names the options; the host registers a driver per kind at start-up.
/// Equal options mean one shared source: `description` is part of the source's id.
public protocol SourceOptions: Sendable, Hashable, CustomStringConvertible {
    /// The kind, e.g. `files` or `journal`; the prefix of source ids (`files:/etc recursive`).
    static var kind: String { get }
}

/// Makes a source for options of one kind.
public typealias SourceDriver = @Sendable (_ options: any SourceOptions, _ id: String) -> any EventSource

extension Bus {
    /// Registers the driver for `kind` (the host does this for its built-in sources), replacing
    /// any earlier one; running sources keep the driver that made them.
    public func registerSource(kind: String, driver: @escaping SourceDriver) {
        core.drivers.withLock { $0[kind] = driver }
    }

    /// Registers the driver for the kind of `type`, whose options the bus can then also rebuild
    /// from their `Codable` form: how a module in a worker process asks the host for a source.
    public func registerSource<Options: SourceOptions & Decodable>(_ type: Options.Type, driver: @escaping SourceDriver) {
        core.optionDecoders.withLock { $0[Options.kind] = { try JSONDecoder().decode(Options.self, from: $0) } }
        registerSource(kind: Options.kind, driver: driver)
    }

    /// Options of `kind` rebuilt from their JSON encoding, for a kind registered with its type
    /// (``registerSource(_:driver:)``) or timers. Throws ``EventBusError/Code/sourceUnavailable``
    /// for another kind, and the decoder's error for options that do not decode or validate.
    public func decodeSourceOptions(kind: String, from data: Data) throws -> any SourceOptions {
        guard let decode = core.optionDecoders.withLock({ $0[kind] }) else {
            throw EventBusError(.sourceUnavailable, "no \(kind) source on this bus that options can be sent to")
        }
        return try decode(data)
    }

    /// The kinds with a registered driver, sorted (timers included).
    public var sourceKinds: [String] {
        core.drivers.withLock { $0.keys.sorted() }
    }

    /// Whether a driver is registered for `kind`.
    public func hasSource(kind: String) -> Bool {
        core.drivers.withLock { $0[kind] != nil }
    }

    /// Events matching `patterns` from the shared source for `options`, started on first use.
    /// Throws ``EventBusError/Code/sourceUnavailable`` when no driver is registered for the kind
    /// (for example in a plain `Bus()` outside the host).
    public func publisher<Options: SourceOptions>(for patterns: [EventPattern], from options: Options) throws -> EventPublisher {
        let id = "\(Options.kind):\(options)"
        if core.remote != nil {
            // A worker's bus: the host runs the source; a kind the host lacks was never
            // registered here (the worker registers the host's kinds), so it throws below.
            guard core.drivers.withLock({ $0[Options.kind] }) != nil else {
                throw EventBusError(.sourceUnavailable, "the host offers no \(Options.kind) source")
            }
            return publisher(for: patterns, from: SourceRequest(id: id, options: options) {
                preconditionFailure("a worker's bus never starts a source")
            })
        }
        guard let driver = core.drivers.withLock({ $0[Options.kind] }) else {
            throw EventBusError(.sourceUnavailable,
                "no \(Options.kind) source on this bus: the host registers it (a bus made with Bus() has timers only)")
        }
        return publisher(for: patterns, from: SourceRequest(id: id, options: options) { driver(options, id) })
    }
}
