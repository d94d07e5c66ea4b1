import CSystemd

/// Appends the arguments of a method call in order, containers and variants included: what a
/// call with a complex body (`StartTransientUnit`'s `a(sv)` of properties) needs. It lives only
/// inside ``SDBus/call(path:interface:member:timeout:body:reply:)``, on the connection's thread.
public struct SDBusMessageWriter {
    let message: OpaquePointer
    /// The method, for error messages.
    let member: String

    public func string(_ value: String) throws(SDBusError) {
        try check(value.withCString { sd_bus_message_append_basic(message, Self.code("s"), $0) })
    }

    /// A `b`: D-Bus booleans are 32-bit.
    public func bool(_ value: Bool) throws(SDBusError) {
        var word: Int32 = value ? 1 : 0
        try check(sd_bus_message_append_basic(message, Self.code("b"), &word))
    }

    public func int32(_ value: Int32) throws(SDBusError) {
        var value = value
        try check(sd_bus_message_append_basic(message, Self.code("i"), &value))
    }

    public func uint32(_ value: UInt32) throws(SDBusError) {
        var value = value
        try check(sd_bus_message_append_basic(message, Self.code("u"), &value))
    }

    /// A `t`.
    public func uint64(_ value: UInt64) throws(SDBusError) {
        var value = value
        try check(sd_bus_message_append_basic(message, Self.code("t"), &value))
    }

    /// An `ay`, in one copy.
    public func bytes(_ value: [UInt8]) throws(SDBusError) {
        try check(value.withUnsafeBytes { sd_bus_message_append_array(message, Self.code("y"), $0.baseAddress, $0.count) })
    }

    /// An `as`.
    public func strings(_ values: [String]) throws(SDBusError) {
        try container("a", "s") { () throws(SDBusError) in
            for value in values { try string(value) }
        }
    }

    /// A container (`a`, `r`, `e`, `v`) of `contents`, whose elements `body` appends.
    public func container(_ type: Character, _ contents: String, _ body: () throws(SDBusError) -> Void) throws(SDBusError) {
        try check(sd_bus_message_open_container(message, Self.code(type), contents))
        try body()
        try check(sd_bus_message_close_container(message))
    }

    /// A `v` holding `value` with its own signature.
    public func variant(_ value: SDBusVariant) throws(SDBusError) {
        try container("v", value.signature) { () throws(SDBusError) in
            switch value {
            case .string(let text): try string(text)
            case .bool(let flag): try bool(flag)
            case .int32(let number): try int32(number)
            case .uint32(let number): try uint32(number)
            case .uint64(let number): try uint64(number)
            case .bytes(let bytes): try self.bytes(bytes)
            case .strings(let texts): try strings(texts)
            case .commands(let commands):
                try container("a", "(sasb)") { () throws(SDBusError) in
                    for command in commands {
                        try container("r", "sasb") { () throws(SDBusError) in
                            try string(command.path)
                            try strings(command.arguments)
                            try bool(command.ignoresFailure)
                        }
                    }
                }
            }
        }
    }

    /// An `a(sv)`: unit properties as `StartTransientUnit` and `SetUnitProperties` take them.
    public func properties(_ properties: [(name: String, value: SDBusVariant)]) throws(SDBusError) {
        try container("a", "(sv)") { () throws(SDBusError) in
            for property in properties {
                try container("r", "sv") { () throws(SDBusError) in
                    try string(property.name)
                    try variant(property.value)
                }
            }
        }
    }

    private func check(_ result: Int32) throws(SDBusError) {
        try SDBusError.check(result, "append to \(member)")
    }

    private static func code(_ type: Character) -> CChar { CChar(bitPattern: type.asciiValue!) }
}

/// A value to send in a `v`, with its exact D-Bus type (systemd refuses a `u` where it wants a `t`).
public enum SDBusVariant: Sendable, Equatable {
    case string(String)
    case bool(Bool)
    case int32(Int32)
    case uint32(UInt32)
    /// A `t`.
    case uint64(UInt64)
    /// An `ay`.
    case bytes([UInt8])
    /// An `as`.
    case strings([String])
    /// An `a(sasb)`: `ExecStart=` and its kin.
    case commands([SDBusExecCommand])

    public var signature: String {
        switch self {
        case .string: "s"
        case .bool: "b"
        case .int32: "i"
        case .uint32: "u"
        case .uint64: "t"
        case .bytes: "ay"
        case .strings: "as"
        case .commands: "a(sasb)"
        }
    }
}

/// One command of an `ExecStart=`-like property, as systemd takes it over D-Bus: the program's
/// path, its whole argv (argv[0] included), and whether a failure is ignored (`-` in a unit file).
public struct SDBusExecCommand: Sendable, Equatable {
    public var path: String
    public var arguments: [String]
    public var ignoresFailure: Bool

    public init(path: String, arguments: [String], ignoresFailure: Bool = false) {
        self.path = path
        self.arguments = arguments
        self.ignoresFailure = ignoresFailure
    }
}
