/// An answer on the cold path — `status`, `stats`, `modules`, `rules`, `listing` — as one
/// `Codable` type that both ends share: the host writes it with ``json``, a client reads it with
/// ``ControlResponse/decode(_:)``, and its `CodingKeys` are its members' names on the wire
/// (`PROTOCOL.md`). Members a type keeps `Optional` may be absent (the `?` of `PROTOCOL.md`);
/// the others are required, and a line without them is refused with the member's path.
///
/// The lines of a stream and the answers to posts stay written by hand (``EventLine``,
/// ``GapLine``, ``PostedBatch``): their speed is measured, and `Codable`'s containers allocate
/// per member.
public protocol CodableAnswer: Codable, Sendable {
    /// The answer's `type` member.
    static var type: String { get }
}

extension CodableAnswer {
    /// The answer's line: its members, and `type`.
    public var json: JSON {
        do {
            guard case .object(var members) = try JSON(encoding: self) else { preconditionFailure("a \(Self.type) answer is an object") }
            members["type"] = .string(Self.type)
            return .object(members)
        } catch {
            // Only an integer beyond Int64 is refused, and the answers' integers are Int64s and
            // bus sequence numbers, which do not grow that large.
            preconditionFailure("a \(Self.type) answer cannot be encoded: \(error)")
        }
    }

    /// Reads a line whose `type` is this answer's.
    static func decode(_ line: JSON) throws(ResponseDecodingError) -> Self {
        do {
            return try line.decode(Self.self)
        } catch {
            throw ResponseDecodingError(description: error.reading("a \(type) answer"))
        }
    }
}
