extension JSON {
    /// `value`'s `Codable` form as a JSON value: how the host builds its cold-path answers
    /// (``CodableAnswer``), written then by ``JSONWriter`` as every other line is.
    ///
    /// Optional members that are nil are left out (`encodeIfPresent`); integers become
    /// ``int(_:)`` — one beyond `Int64` is refused rather than changed — and `Double`s
    /// ``double(_:)``, so a reader tells them apart as the writer meant them.
    public init<Value: Encodable>(encoding value: Value) throws(EncodingError) {
        do {
            self = try JSONTreeEncoder.node(for: value, codingPath: []).json
        } catch let error as EncodingError {
            throw error
        } catch {
            throw EncodingError.invalidValue(value, .init(codingPath: [], debugDescription: "\(error)", underlyingError: error))
        }
    }
}

/// A value being encoded: a scalar, or an object or a list whose members and items are filled
/// in by the containers an `encode(to:)` asks for (and by containers nested in those), so it is
/// a reference the containers share.
final class JSONNode {
    enum Content {
        case scalar(JSON)
        case object([String: JSONNode])
        case array([JSONNode])
    }

    var content: Content

    init(_ content: Content) {
        self.content = content
    }

    var json: JSON {
        switch content {
        case .scalar(let value): return value
        case .object(let members): return .object(members.mapValues(\.json))
        case .array(let items): return .array(items.map(\.json))
        }
    }
}

/// An `Encoder` that writes into one ``JSONNode``.
struct JSONTreeEncoder: Encoder, SingleValueEncodingContainer {
    let node: JSONNode
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// The node for `value`: the protocol's scalars directly, anything else through its own
    /// `encode(to:)`.
    static func node<Value: Encodable>(for value: Value, codingPath: [any CodingKey]) throws -> JSONNode {
        if let text = value as? String { return JSONNode(.scalar(.string(text))) }
        if let flag = value as? Bool { return JSONNode(.scalar(.bool(flag))) }
        if let number = value as? Double { return JSONNode(.scalar(.double(number))) }
        if let number = value as? Float { return JSONNode(.scalar(.double(Double(number)))) }
        if let integer = value as? any FixedWidthInteger {
            guard let number = Int64(exactly: integer) else {
                throw EncodingError.invalidValue(value, .init(codingPath: codingPath, debugDescription: "\(integer) is beyond a JSON integer's range (Int64)"))
            }
            return JSONNode(.scalar(.int(number)))
        }
        let node = JSONNode(.scalar(.null))
        try value.encode(to: JSONTreeEncoder(node: node, codingPath: codingPath))
        return node
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = node.content {} else { node.content = .object([:]) }
        return KeyedEncodingContainer(Members(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = node.content {} else { node.content = .array([]) }
        return Items(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { self }

    func encodeNil() { node.content = .scalar(.null) }

    /// Every scalar `encode` of `SingleValueEncodingContainer` (one generic witness for them all).
    func encode<Value: Encodable>(_ value: Value) throws {
        node.content = try Self.node(for: value, codingPath: codingPath).content
    }

    /// An object's members, by `Key`.
    private struct Members<Key: CodingKey>: KeyedEncodingContainerProtocol {
        let node: JSONNode
        let codingPath: [any CodingKey]

        func encodeNil(forKey key: Key) { set(key, JSONNode(.scalar(.null))) }

        /// Every `encode(_:forKey:)` of the protocol (one generic witness for them all).
        func encode<Value: Encodable>(_ value: Value, forKey key: Key) throws {
            set(key, try JSONTreeEncoder.node(for: value, codingPath: codingPath + [key]))
        }

        func nestedContainer<Nested: CodingKey>(keyedBy keyType: Nested.Type, forKey key: Key) -> KeyedEncodingContainer<Nested> {
            encoder(forKey: key).container(keyedBy: keyType)
        }

        func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer { encoder(forKey: key).unkeyedContainer() }

        func superEncoder() -> any Encoder { encoder(forKey: JSONKey(stringValue: "super")) }

        func superEncoder(forKey key: Key) -> any Encoder { encoder(forKey: key) }

        private func encoder(forKey key: any CodingKey) -> JSONTreeEncoder {
            let child = JSONNode(.scalar(.null))
            set(key, child)
            return JSONTreeEncoder(node: child, codingPath: codingPath + [key])
        }

        private func set(_ key: any CodingKey, _ child: JSONNode) {
            guard case .object(var members) = node.content else { return }
            members[key.stringValue] = child
            node.content = .object(members)
        }
    }

    /// A list's items, appended in order.
    private struct Items: UnkeyedEncodingContainer {
        let node: JSONNode
        let codingPath: [any CodingKey]

        var count: Int {
            guard case .array(let items) = node.content else { return 0 }
            return items.count
        }

        func encodeNil() { append(JSONNode(.scalar(.null))) }

        /// Every `encode(_:)` of the protocol (one generic witness for them all).
        func encode<Value: Encodable>(_ value: Value) throws {
            append(try JSONTreeEncoder.node(for: value, codingPath: codingPath + [JSONKey(index: count)]))
        }

        func nestedContainer<Nested: CodingKey>(keyedBy keyType: Nested.Type) -> KeyedEncodingContainer<Nested> {
            nextEncoder().container(keyedBy: keyType)
        }

        func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { nextEncoder().unkeyedContainer() }

        func superEncoder() -> any Encoder { nextEncoder() }

        private func nextEncoder() -> JSONTreeEncoder {
            let child = JSONNode(.scalar(.null))
            let path = codingPath + [JSONKey(index: count)]
            append(child)
            return JSONTreeEncoder(node: child, codingPath: path)
        }

        private func append(_ child: JSONNode) {
            guard case .array(var items) = node.content else { return }
            items.append(child)
            node.content = .array(items)
        }
    }
}
