/// The lines of a subscription's stream that the host writes by hand, straight into the
/// connection's buffer (a tail carries hundreds of thousands a second): their member order is
/// fixed and part of the protocol, so a client may read them without a JSON parser.

/// An `event` line's layout. The host writes
///
///     {"type":"event","seq":N,"name":"…","source":"…","time":"…","mono":N,"fields":{…}}
///
/// with exactly these members in exactly this order, no spaces, and the field keys sorted. The
/// CLI's short format reads it by these pieces and falls back to a JSON parser when a line does
/// not match them (`PROTOCOL.md`, Event lines).
public enum EventLine {
    /// `{"type":"event","seq":` — a line that starts otherwise is not an event line.
    @inlinable public static var start: StaticString { #"{"type":"event","seq":"# }
    @inlinable public static var name: StaticString { #","name":"# }
    @inlinable public static var source: StaticString { #","source":"# }
    @inlinable public static var time: StaticString { #","time":"# }
    @inlinable public static var mono: StaticString { #","mono":"# }
    /// Opens the fields object; the line ends with ``end``.
    @inlinable public static var fields: StaticString { #","fields":{"# }
    @inlinable public static var end: StaticString { "}}\n" }

    /// The members in the order they are written.
    public static let memberOrder = ["type", "seq", "name", "source", "time", "mono", "fields"]
}

/// Why a `gap` line announces missing events.
public enum GapReason: String, Sendable {
    /// Its buffer was full: it did not read fast enough.
    case slowClient = "slow_client"
    /// The replay it asked for starts before the oldest event the host still holds.
    case replay
    /// The host shut down before the client read them (it had a moment to, and did not).
    case shutdown
}

/// A `gap` line: events a client did not get, and why. Written as
///
///     {"type":"gap","reason":"…","dropped":N,"first_seq":N,"last_seq":N}
///
/// with `type` first, like an event line.
public struct GapLine: Equatable, Sendable {
    /// `{"type":"gap",` — how a line that is a gap line starts.
    @inlinable public static var start: StaticString { #"{"type":"gap","# }

    /// Kept as text: a newer host may give a reason this client does not know.
    public var reason: String
    public var dropped: Int64
    public var first: Int64
    public var last: Int64

    init(_ members: Members) throws(ResponseDecodingError) {
        reason = try members.string("reason")
        dropped = try members.int("dropped")
        first = try members.int("first_seq")
        last = try members.int("last_seq")
    }
}

extension JSONWriter {
    /// A whole `gap` line.
    public mutating func gapLine(dropped: Int, first: UInt64, last: UInt64, reason: GapReason) {
        raw(GapLine.start)
        raw("\"reason\":")
        string(reason.rawValue)
        raw(",\"dropped\":")
        int(dropped)
        raw(",\"first_seq\":")
        unsigned(first)
        raw(",\"last_seq\":")
        unsigned(last)
        raw("}\n")
    }
}

/// The answer to a batch `post`: `count` (events posted), `seqs` (one per item: its sequence
/// number, or null where it was refused), `errors` (when any was: each with its `index`).
/// Written by hand: a batch answer is one number per event.
public enum PostedBatch {
    /// The answer as a client reads it: for each item of the batch, in order, its sequence
    /// number or why the host did not post it.
    public struct Answer: Equatable, Sendable {
        public enum Item: Equatable, Sendable {
            case posted(sequence: UInt64)
            case refused(ControlError)
        }

        public var items: [Item]

        public init(items: [Item]) { self.items = items }

        init(_ members: Members) throws(ResponseDecodingError) {
            var refusals: [Int64: ControlError] = [:]
            for error in members["errors"]?.arrayValue ?? [] {
                guard let index = error["index"]?.intValue else { continue }
                refusals[index] = ControlError(ControlError.Code(rawValue: error["code"]?.stringValue ?? "unknown"),
                                               error["message"]?.stringValue ?? "not posted")
            }
            items = try members.array("seqs").enumerated().map { index, sequence in
                if let number = sequence.intValue { return .posted(sequence: UInt64(clamping: number)) }
                return .refused(refusals[Int64(index)] ?? ControlError(ControlError.Code(rawValue: "unknown"), "not posted"))
            }
        }
    }

    /// Writes the answer line. `sequence(index)` is the item's number, or its refusal.
    public static func write(items: Int, posted: Int, id: JSON?, into out: inout JSONWriter,
                             sequence: (Int) -> Result<UInt64, ControlError>) {
        out.raw("{\"type\":\"posted\",\"count\":")
        out.int(posted)
        out.raw(",\"seqs\":[")
        var errors: [JSON] = []
        for index in 0..<items {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            switch sequence(index) {
            case .success(let number): out.unsigned(number)
            case .failure(let refusal):
                out.raw("null")
                errors.append(["index": .int(Int64(index)), "code": .string(refusal.code.rawValue), "message": .string(refusal.message)])
            }
        }
        out.byte(UInt8(ascii: "]"))
        if !errors.isEmpty {
            out.raw(",\"errors\":")
            out.value(.array(errors))
        }
        if let id {
            out.raw(",\"id\":")
            out.value(id)
        }
        out.raw("}\n")
    }
}
