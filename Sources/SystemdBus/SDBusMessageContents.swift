import CSystemd

/// One basic D-Bus value as a message carries it, with its exact type: what a reader of
/// arbitrary messages (the D-Bus signal source) gets before it decides how to show it.
public enum SDBusBasicValue: Equatable, Sendable {
    case byte(UInt8)
    case bool(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
}

/// Reading a message whose shape is not known in advance: its header, then its arguments one
/// complete type at a time (``peek()`` says what comes next). On the thread that owns the
/// connection, inside the handler the message was given to.
extension SDBusMessageReader {
    /// The sender's unique name (`:1.42`); nil on a peer-to-peer connection.
    public var sender: String? { sd_bus_message_get_sender(message).map { String(cString: $0) } }
    public var interface: String? { sd_bus_message_get_interface(message).map { String(cString: $0) } }
    /// The signature of the whole body (`sa{sv}as`), empty for none.
    public var signature: String { sd_bus_message_get_signature(message, 1).map { String(cString: $0) } ?? "" }
    public var isSignal: Bool { sd_bus_message_is_signal(message, nil, nil) > 0 }

    /// The next complete type in the current container: its type code (`s`, `a`, `r`, `e`, `v`…)
    /// and, for a container, what it holds — an array's element signature (`{sv}`, `s`), a
    /// struct's or dict entry's members without their brackets (`si`, `sv`), a variant's
    /// signature. Nil at the end of the container (or of the body), and on a malformed message.
    public func peek() -> (type: Character, contents: String)? {
        var type: CChar = 0
        var contents: UnsafePointer<CChar>?
        guard sd_bus_message_peek_type(message, &type, &contents) > 0 else { return nil }
        return (Character(Unicode.Scalar(UInt8(bitPattern: type))), contents.map { String(cString: $0) } ?? "")
    }

    /// Reads the next argument as a basic value of `type` (any basic type but the unix fd `h`,
    /// which the caller skips); nil when it is not one.
    public func basic(_ type: Character) -> SDBusBasicValue? {
        let code = CChar(bitPattern: type.asciiValue ?? 0)
        func read<T: BitwiseCopyable>(_ initial: T) -> T? {
            var value = initial
            let result = withUnsafeMutableBytes(of: &value) { sd_bus_message_read_basic(message, code, $0.baseAddress) }
            return result > 0 ? value : nil
        }
        switch type {
        case "y": return read(UInt8(0)).map { .byte($0) }
        case "b": return read(Int32(0)).map { .bool($0 != 0) }
        case "n": return read(Int16(0)).map { .int16($0) }
        case "q": return read(UInt16(0)).map { .uint16($0) }
        case "i": return read(Int32(0)).map { .int32($0) }
        case "u": return read(UInt32(0)).map { .uint32($0) }
        case "x": return read(Int64(0)).map { .int64($0) }
        case "t": return read(UInt64(0)).map { .uint64($0) }
        case "d": return read(Double(0)).map { .double($0) }
        case "s", "o", "g":
            var pointer: UnsafePointer<CChar>?
            guard sd_bus_message_read_basic(message, code, &pointer) > 0, let pointer else { return nil }
            let text = String(cString: pointer)
            return type == "s" ? .string(text) : type == "o" ? .objectPath(text) : .signature(text)
        default: return nil
        }
    }

    /// Reads the next argument, an `ay`, in one copy; nil when it is not one.
    public func byteArray() -> [UInt8]? {
        var pointer: UnsafeRawPointer?
        var size = 0
        guard sd_bus_message_read_array(message, CChar(bitPattern: UInt8(ascii: "y")), &pointer, &size) >= 0 else { return nil }
        return pointer.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
    }

    /// Skips the next arguments, of `signature`; false when they are not of it.
    public func skip(_ signature: String) -> Bool {
        sd_bus_message_skip(message, signature) >= 0
    }
}
