import EventBusKit
import SystemdBus

/// A signal's arguments as event fields, by the flattening rules ``DBusSignal`` documents
/// (`arg0`, `arg1.count`, `arg1.0`, `arg2.Key`…), within its bounds (depth, elements, fields),
/// naming in ``unrepresented`` whatever it cannot show. Runs on the D-Bus connection's thread,
/// inside the filter that was handed the message.
struct DBusArguments {
    private(set) var fields: [String: FieldValue] = [:]
    private(set) var unrepresented: [String] = []
    /// Top-level `s` arguments by position: what `argN` matches (dbus-daemon matches strings
    /// only, not object paths).
    private(set) var strings: [Int: String] = [:]
    /// Whether the message ended where its signature said (false: malformed, the rest unread).
    private(set) var complete = true
    private var budgetNoted = false

    /// Reads every argument of the message `reader` is positioned at the start of.
    init(reading reader: SDBusMessageReader) {
        var index = 0
        while let (type, contents) = reader.peek() {
            let name = "arg\(index)"
            if type == "s", case .string(let text)? = reader.basic("s") {
                strings[index] = text
                put(name, .string(text))
            } else if !read(type, contents, as: name, depth: 0, reader) {
                complete = false
                unrepresented.append("\(name)… (the message is malformed past here)")
                return
            }
            index += 1
        }
    }

    /// Reads one complete value of `type` into fields named `name`; false when the message did
    /// not hold what its signature said.
    private mutating func read(_ type: Character, _ contents: String, as name: String, depth: Int,
                               _ reader: SDBusMessageReader) -> Bool {
        switch type {
        case "h":
            unrepresented.append("\(name) (unix fd)")
            return reader.skip("h")
        case "v":
            guard reader.enter("v", contents), let (inner, innerContents) = reader.peek() else { return false }
            let read = self.read(inner, innerContents, as: name, depth: depth, reader)
            reader.exit()
            return read
        case "a", "r":
            let signature = type == "a" ? "a" + contents : "(" + contents + ")"
            if depth >= DBusSignal.maxDepth {
                unrepresented.append("\(name) (nested deeper than \(DBusSignal.maxDepth))")
                return reader.skip(signature)
            }
            if type == "r" { return readStruct(contents, as: name, depth: depth, reader) }
            if contents == "y" { return readBytes(as: name, reader) }
            if contents.hasPrefix("{") { return readDictionary(String(contents.dropFirst().dropLast()), as: name, depth: depth, reader) }
            return readArray(contents, as: name, depth: depth, reader)
        default:
            guard let value = reader.basic(type) else { return false }
            put(name, Self.field(value))
            return true
        }
    }

    private mutating func readStruct(_ members: String, as name: String, depth: Int, _ reader: SDBusMessageReader) -> Bool {
        guard reader.enter("r", members) else { return false }
        var index = 0
        while let (type, contents) = reader.peek() {
            guard read(type, contents, as: "\(name).\(index)", depth: depth + 1, reader) else { return false }
            index += 1
        }
        reader.exit()
        return true
    }

    private mutating func readArray(_ element: String, as name: String, depth: Int, _ reader: SDBusMessageReader) -> Bool {
        guard reader.enter("a", element) else { return false }
        var count = 0
        while let (type, contents) = reader.peek() {
            if count < DBusSignal.maxElements {
                guard read(type, contents, as: "\(name).\(count)", depth: depth + 1, reader) else { return false }
            } else {
                guard reader.skip(element) else { return false }
            }
            count += 1
        }
        reader.exit()
        put("\(name).count", .int(Int64(count)))
        noteElementsPast(count, as: name)
        return true
    }

    private mutating func readDictionary(_ entry: String, as name: String, depth: Int, _ reader: SDBusMessageReader) -> Bool {
        guard reader.enter("a", "{" + entry + "}") else { return false }
        var count = 0
        while reader.enter("e", entry) {
            if count < DBusSignal.maxElements {
                guard let keyType = entry.first, let key = reader.basic(keyType), let (type, contents) = reader.peek(),
                      read(type, contents, as: "\(name).\(Self.field(key))", depth: depth + 1, reader) else { return false }
            } else {
                guard reader.skip(entry) else { return false }
            }
            reader.exit()
            count += 1
        }
        reader.exit()
        noteElementsPast(count, as: name)
        return true
    }

    /// An `ay` is one hex string, not one field per byte.
    private mutating func readBytes(as name: String, _ reader: SDBusMessageReader) -> Bool {
        guard let bytes = reader.byteArray() else { return false }
        let shown = bytes.prefix(DBusSignal.maxBytes)
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        hex.reserveCapacity(shown.count * 2)
        for byte in shown {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 15)])
        }
        put(name, .string(String(decoding: hex, as: UTF8.self)))
        put("\(name).count", .int(Int64(bytes.count)))
        if bytes.count > DBusSignal.maxBytes {
            unrepresented.append("\(name) bytes \(DBusSignal.maxBytes)… (\(bytes.count - DBusSignal.maxBytes) more bytes past \(DBusSignal.maxBytes))")
        }
        return true
    }

    private mutating func noteElementsPast(_ count: Int, as name: String) {
        guard count > DBusSignal.maxElements else { return }
        unrepresented.append("\(name).\(DBusSignal.maxElements)… (\(count - DBusSignal.maxElements) more elements past \(DBusSignal.maxElements))")
    }

    /// Sets a field unless the field bound is reached or the name is taken (a dictionary key
    /// with dots meeting a nested one): both are named, never silently lost.
    private mutating func put(_ name: String, _ value: FieldValue) {
        if fields[name] != nil {
            unrepresented.append("\(name) (a second field of this name)")
            return
        }
        guard fields.count < DBusSignal.maxFields else {
            if !budgetNoted {
                budgetNoted = true
                unrepresented.append("\(name)… (past \(DBusSignal.maxFields) fields)")
            }
            return
        }
        fields[name] = value
    }

    /// A basic value as its natural field type: a `t` beyond `Int64.max` as decimal text.
    static func field(_ value: SDBusBasicValue) -> FieldValue {
        switch value {
        case .byte(let number): .int(Int64(number))
        case .bool(let flag): .bool(flag)
        case .int16(let number): .int(Int64(number))
        case .uint16(let number): .int(Int64(number))
        case .int32(let number): .int(Int64(number))
        case .uint32(let number): .int(Int64(number))
        case .int64(let number): .int(number)
        case .uint64(let number): number <= UInt64(Int64.max) ? .int(Int64(number)) : .string(String(number))
        case .double(let number): .double(number)
        case .string(let text), .objectPath(let text), .signature(let text): .string(text)
        }
    }
}
