#if canImport(Glibc)
import Glibc
#endif

/// The symbol every module exports; the host looks it up with `dlsym`.
public let moduleEntrySymbol = "eventbus_module"

/// Exports a module's entry point. The one line a module adds:
///
/// ```swift
/// @_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Hello.init) }
/// ```
///
/// It returns a C-layout record: word 0 is a C string naming the SDK interface version and the
/// compiler the module was built with; word 1 is the module factory, which also carries the
/// module type's ``EventBusModule/configKeys`` (so the host can check a config section without
/// making an instance). The host reads word 0 —
/// plain C, safe whatever the module was built with — and touches the Swift object in word 1
/// only when the tags match, so a mismatched module is refused instead of loaded into a crash.
/// `@_alwaysEmitIntoClient` so the tag is the one compiled into the module, not the host's:
/// plain `@inlinable` code is inlined only when optimizing, and a debug-built module called the
/// host's `exportModule` and so always wrote the host's tag.
@_alwaysEmitIntoClient
public func exportModule<Module: EventBusModule>(_ make: @escaping () -> Module) -> UnsafeRawPointer {
    let record = UnsafeMutablePointer<UnsafeRawPointer>.allocate(capacity: 2)
    record[0] = UnsafeRawPointer(strdup(ModuleABI.buildTag)!)
    let factory = ModuleFactory({ make() }, configKeys: Module.configKeys)
    record[1] = UnsafeRawPointer(Unmanaged.passRetained(factory as AnyObject).toOpaque())
    return UnsafeRawPointer(record)
}

/// What a module must have been built with to be loaded.
public enum ModuleABI {
    /// Evaluated where it is compiled: in a module, the SDK and compiler *it* was built with.
    /// Swift has no stable ABI here (no library evolution), so both must match the host's.
    /// The SDK part is ``interfaceFingerprint``, generated from the SDK's sources at build time
    /// (the SDKFingerprint plugin): nothing to bump by hand.
    @_alwaysEmitIntoClient
    public static var buildTag: String {
        let sdk = interfaceFingerprint
        #if compiler(>=6.4)
        let compiler = "swift-6.4-or-later"
        #elseif compiler(>=6.3.2)
        let compiler = "swift-6.3.2-or-later"
        #elseif compiler(>=6.3.1)
        let compiler = "swift-6.3.1"
        #elseif compiler(>=6.3)
        let compiler = "swift-6.3.0"
        #else
        let compiler = "swift-before-6.3"
        #endif
        return sdk + " " + compiler + " eventbuskit-" + release
    }

    /// The SDK's release (eventbusd's), named in a mismatch message so that a person sees
    /// "EventBusKit 0.3.0 … this host runs 0.4.0" and not only two fingerprints. Not part of
    /// what must match: two releases with the same interface and compiler load each other's
    /// modules.
    @_alwaysEmitIntoClient
    public static var release: String { "0.3.0" }

    /// The words of a build tag that must equal the host's: the interface fingerprint and the
    /// compiler. Tags written before the release was added have only these two.
    public static func binaryInterface(of tag: String) -> ArraySlice<Substring> {
        tag.split(separator: " ").prefix(2)
    }

    /// A tag's words as a person reads them: "EventBusKit 0.3.0 (interface sha256:…) and
    /// swift-6.3.1".
    static func described(_ tag: String) -> String {
        let words = tag.split(separator: " ")
        let release = words.count > 2 && words[2].hasPrefix("eventbuskit-") ? " " + words[2].dropFirst("eventbuskit-".count) : " (release not recorded)"
        let interface = words.first.map { " (interface \($0))" } ?? ""
        let compiler = words.count > 1 ? " and \(words[1])" : ""
        return "EventBusKit" + release + interface + compiler
    }
}

/// Makes module instances; what word 1 of the export record holds.
public final class ModuleFactory {
    @usableFromInline let make: () -> any EventBusModule
    /// What the module's config section may hold (``EventBusModule/configKeys``).
    public let configKeys: ModuleConfigKeys

    @usableFromInline
    init(_ make: @escaping () -> any EventBusModule, configKeys: ModuleConfigKeys) {
        self.make = make
        self.configKeys = configKeys
    }

    /// Reads an export record (what the module's `eventbus_module` returned) and returns its
    /// factory, refusing a module built for another ABI, or one carrying its own SDK copy.
    public static func open(record: UnsafeRawPointer) throws -> ModuleFactory {
        let words = record.assumingMemoryBound(to: UnsafeRawPointer.self)
        let tag = String(cString: words[0].assumingMemoryBound(to: CChar.self))
        let theirs = ModuleABI.binaryInterface(of: tag), ours = ModuleABI.binaryInterface(of: ModuleABI.buildTag)
        guard theirs == ours else {
            var what: [String] = []
            if theirs.first != ours.first { what.append("another EventBusKit interface") }
            if theirs.dropFirst().first != ours.dropFirst().first { what.append("another compiler") }
            throw EventBusError(.moduleABIMismatch,
                "built with \(what.isEmpty ? "another SDK" : what.joined(separator: " and ")): the module was built with \(ModuleABI.described(tag)), this host runs \(ModuleABI.described(ModuleABI.buildTag)); rebuild the module against this host's SDK (eventbus module sdk-path)")
        }
        let object = Unmanaged<AnyObject>.fromOpaque(words[1]).takeUnretainedValue()
        guard let factory = object as? ModuleFactory else {
            throw EventBusError(.duplicateSDK,
                "its objects are not this host's EventBusKit types (\(type(of: object))): the module links its own copy of EventBusKit or OpenCombine; depend only on the EventBusKit product, which is a dynamic library")
        }
        return factory
    }

    public func makeModule() -> any EventBusModule { make() }
}
