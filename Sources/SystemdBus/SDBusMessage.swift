import CSystemd
import Foundation

/// A value of a D-Bus property, as far as the units source and the transient-unit launcher read them.
public enum PropertyValue: Equatable, Sendable {
    case string(String)
    case int(Int64)
    case unsigned(UInt64)
    case bool(Bool)
    case bytes([UInt8])

    public var string: String? { if case .string(let value) = self { value } else { nil } }
    public var integer: Int? {
        switch self {
        case .int(let value): Int(clamping: value)
        case .unsigned(let value): Int(clamping: value)
        default: nil
        }
    }
    public var unsigned: UInt64? { if case .unsigned(let value) = self { value } else { nil } }
    /// An `ay` as lowercase hex (how systemd prints an InvocationID); nil for an empty one.
    public var hex: String? {
        guard case .bytes(let bytes) = self, !bytes.isEmpty else { return nil }
        return bytes.map { String(format: "%02x", $0) }.joined()
    }
}

/// Reads the arguments of an sd-bus message in order. Any failure makes the reader return nil
/// from then on: a message of an unexpected shape is ignored, never half-applied.
public struct SDBusMessageReader {
    public let message: OpaquePointer

    public init(_ message: OpaquePointer) {
        self.message = message
    }

    /// The D-Bus error name of a failed reply, nil for a successful one.
    public var errorName: String? {
        guard let error = sd_bus_message_get_error(message), let name = error.pointee.name else { return nil }
        let text = error.pointee.message.map { String(cString: $0) }
        return String(cString: name) + (text.map { ": \($0)" } ?? "")
    }

    public var path: String? { sd_bus_message_get_path(message).map { String(cString: $0) } }
    public var member: String? { sd_bus_message_get_member(message).map { String(cString: $0) } }

    public func string() -> String? { text(type: "s") }
    public func objectPath() -> String? { text(type: "o") }

    public func uint32() -> UInt32? {
        var value: UInt32 = 0
        return sd_bus_message_read_basic(message, Self.code("u"), &value) > 0 ? value : nil
    }

    public func bool() -> Bool? {
        var value: Int32 = 0
        return sd_bus_message_read_basic(message, Self.code("b"), &value) > 0 ? value != 0 : nil
    }

    private func text(type: Character) -> String? {
        var pointer: UnsafePointer<CChar>?
        guard sd_bus_message_read_basic(message, Self.code(type), &pointer) > 0, let pointer else { return nil }
        return String(cString: pointer)
    }

    /// Enters a container (`a`, `r`, `e`, `v`) of `contents`; false when the next argument is not one.
    public func enter(_ type: Character, _ contents: String) -> Bool {
        sd_bus_message_enter_container(message, Self.code(type), contents) > 0
    }

    public func exit() { sd_bus_message_exit_container(message) }

    /// An `a{sv}` (PropertiesChanged, GetAll): the values of the types ``PropertyValue`` has;
    /// others are skipped.
    public func properties() -> [String: PropertyValue]? {
        guard enter("a", "{sv}") else { return nil }
        var properties: [String: PropertyValue] = [:]
        while sd_bus_message_enter_container(message, Self.code("e"), "sv") > 0 {
            guard let name = string(), let value = variant() else { return nil }
            if let value = value { properties[name] = value }
            exit()
        }
        exit()
        return properties
    }

    /// A `v`: .some(nil) for a type the source does not read (skipped), nil on failure.
    public func variant() -> PropertyValue?? {
        var type: CChar = 0
        var contents: UnsafePointer<CChar>?
        guard sd_bus_message_peek_type(message, &type, &contents) > 0, let contents else { return nil }
        let signature = String(cString: contents)
        guard enter("v", signature) else { return nil }
        defer { exit() }
        switch signature {
        case "s": return string().map { .some(.string($0)) }
        case "b": return bool().map { .some(.bool($0)) }
        case "u":
            return uint32().map { .some(.unsigned(UInt64($0))) }
        case "t":
            var value: UInt64 = 0
            return sd_bus_message_read_basic(message, Self.code("t"), &value) > 0 ? .some(.unsigned(value)) : nil
        case "i":
            var value: Int32 = 0
            return sd_bus_message_read_basic(message, Self.code("i"), &value) > 0 ? .some(.int(Int64(value))) : nil
        case "ay":
            var pointer: UnsafeRawPointer?
            var size = 0
            guard sd_bus_message_read_array(message, Self.code("y"), &pointer, &size) >= 0 else { return nil }
            let bytes = pointer.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
            return .some(.bytes(bytes))
        default:
            return sd_bus_message_skip(message, signature) >= 0 ? .some(nil) : nil
        }
    }

    private static func code(_ type: Character) -> CChar { CChar(bitPattern: type.asciiValue!) }
}
