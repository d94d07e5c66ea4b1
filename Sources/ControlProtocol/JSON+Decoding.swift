extension JSON {
    /// Reads this value as `Value`'s `Codable` form: how a client reads the host's cold-path
    /// answers (``CodableAnswer``), and the host a worker's ``JSON`` messages.
    ///
    /// Members `Value` does not name are ignored (a newer peer may add some); a member it needs
    /// that is missing or of another kind throws, naming the member's path and what was found
    /// (`control.replay.held: expected an integer, found a string`). Integers are read exactly
    /// (no rounding into a narrower type), a `Double` also from an integer.
    public func decode<Value: Decodable>(_ type: Value.Type = Value.self) throws(DecodingError) -> Value {
        do {
            return try JSONTreeDecoder(value: self, codingPath: []).read(Value.self)
        } catch let error as DecodingError {
            throw error
        } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "\(error)", underlyingError: error))
        }
    }
}

/// A `Decoder` over one node of a ``JSON`` tree. The protocol's scalars are read straight from
/// the node (``read(_:)``); anything else goes through its own `init(from:)`, which asks this
/// decoder for the containers below.
struct JSONTreeDecoder: Decoder, SingleValueDecodingContainer {
    let value: JSON
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else { throw mismatch(Key.self, expected: "an object") }
        return KeyedDecodingContainer(Members(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else { throw mismatch([JSON].self, expected: "a list") }
        return Items(items: items, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func decodeNil() -> Bool { value == .null }

    /// Every scalar `decode` of `SingleValueDecodingContainer` (one generic witness for them all).
    func decode<Value: Decodable>(_ type: Value.Type) throws -> Value { try read(type) }

    /// `Value` from this node.
    func read<Value: Decodable>(_ type: Value.Type) throws -> Value {
        if Value.self == String.self {
            guard case .string(let text) = value else { throw mismatch(Value.self, expected: "a string") }
            return text as! Value
        }
        if Value.self == Bool.self {
            guard case .bool(let flag) = value else { throw mismatch(Value.self, expected: "true or false") }
            return flag as! Value
        }
        if Value.self == Double.self || Value.self == Float.self {
            guard let number = value.doubleValue else { throw mismatch(Value.self, expected: "a number") }
            return (Value.self == Double.self ? number as Any : Float(number) as Any) as! Value
        }
        if let integer = Value.self as? any FixedWidthInteger.Type {
            guard case .int(let number) = value else { throw mismatch(Value.self, expected: "an integer") }
            guard let exact = Self.exactly(number, as: integer) else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "\(number) is out of range for \(Value.self)"))
            }
            return exact as! Value
        }
        return try Value(from: self)
    }

    private static func exactly<Integer: FixedWidthInteger>(_ number: Int64, as type: Integer.Type) -> Integer? {
        Integer(exactly: number)
    }

    /// A node of another kind than `expected`; null counts as a missing value.
    private func mismatch(_ type: Any.Type, expected: String) -> DecodingError {
        let context = DecodingError.Context(codingPath: codingPath, debugDescription: "expected \(expected), found \(value.kindName)")
        return value == .null ? .valueNotFound(type, context) : .typeMismatch(type, context)
    }

    /// An object's members, by `Key`.
    private struct Members<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let members: [String: JSON]
        let codingPath: [any CodingKey]

        var allKeys: [Key] { members.keys.compactMap(Key.init(stringValue:)) }

        func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

        func decodeNil(forKey key: Key) throws -> Bool { try member(key).value == .null }

        /// Every `decode(_:forKey:)` of the protocol (one generic witness for them all).
        func decode<Value: Decodable>(_ type: Value.Type, forKey key: Key) throws -> Value { try member(key).read(type) }

        func nestedContainer<Nested: CodingKey>(keyedBy type: Nested.Type, forKey key: Key) throws -> KeyedDecodingContainer<Nested> {
            try member(key).container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { try member(key).unkeyedContainer() }

        func superDecoder() throws -> any Decoder {
            JSONTreeDecoder(value: members["super"] ?? .null, codingPath: codingPath + [JSONKey(stringValue: "super")])
        }

        func superDecoder(forKey key: Key) throws -> any Decoder {
            JSONTreeDecoder(value: members[key.stringValue] ?? .null, codingPath: codingPath + [key])
        }

        private func member(_ key: Key) throws -> JSONTreeDecoder {
            guard let value = members[key.stringValue] else {
                throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no member \"\(key.stringValue)\""))
            }
            return JSONTreeDecoder(value: value, codingPath: codingPath + [key])
        }
    }

    /// A list's items, in order.
    private struct Items: UnkeyedDecodingContainer {
        let items: [JSON]
        let codingPath: [any CodingKey]
        var currentIndex = 0

        init(items: [JSON], codingPath: [any CodingKey]) {
            self.items = items
            self.codingPath = codingPath
        }

        var count: Int? { items.count }
        var isAtEnd: Bool { currentIndex >= items.count }

        mutating func decodeNil() throws -> Bool {
            guard try next().value == .null else { return false }
            currentIndex += 1
            return true
        }

        /// Every `decode(_:)` of the protocol (one generic witness for them all).
        mutating func decode<Value: Decodable>(_ type: Value.Type) throws -> Value {
            let value = try next().read(type)
            currentIndex += 1
            return value
        }

        mutating func nestedContainer<Nested: CodingKey>(keyedBy type: Nested.Type) throws -> KeyedDecodingContainer<Nested> {
            let container = try next().container(keyedBy: type)
            currentIndex += 1
            return container
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            let container = try next().unkeyedContainer()
            currentIndex += 1
            return container
        }

        mutating func superDecoder() throws -> any Decoder {
            let decoder = try next()
            currentIndex += 1
            return decoder
        }

        private func next() throws -> JSONTreeDecoder {
            let path = codingPath + [JSONKey(index: currentIndex)]
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(JSON.self, .init(codingPath: path, debugDescription: "the list has only \(items.count) item(s)"))
            }
            return JSONTreeDecoder(value: items[currentIndex], codingPath: path)
        }
    }
}
