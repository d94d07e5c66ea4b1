/// Where an event stands in the host's numbering: the host's *life* and the event's sequence
/// number in it, written `LIFE:SEQ` (`3f9a0c12b7e4:1200`), as `post --print-seq` prints it and
/// `tail --since` takes it.
///
/// Why a life: each eventbusd process numbers its events from #1, so a bare number saved before
/// a restart names another event — or none — in the next process, and a tail started from it
/// printed nothing and warned of nothing. A life is a random id the host draws when it starts
/// (shown by `status`, sent in every `hello`); a cursor of another life is known for what it is.
public struct EventCursor: Equatable, Sendable, CustomStringConvertible {
    /// The host life the number counts in; nil for a bare `SEQ` (read as this life's).
    public var life: String?
    public var sequence: UInt64

    public init(life: String?, sequence: UInt64) {
        self.life = life
        self.sequence = sequence
    }

    /// `LIFE:SEQ`, `SEQ` or `#SEQ`; nil for anything else. A life is 12 lowercase hex digits,
    /// as ``newLife()`` draws them — so a time such as `09:00` is never read as a cursor.
    public init?(_ text: String) {
        let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        var number = parts.last!
        if parts.count == 1, number.hasPrefix("#") { number = number.dropFirst() }
        guard !number.isEmpty, number.allSatisfy({ $0.isASCII && $0.isNumber }), let sequence = UInt64(number) else { return nil }
        if parts.count == 2 {
            let life = parts[0]
            guard Self.isLife(life) else { return nil }
            self.life = String(life)
        }
        self.sequence = sequence
    }

    /// A new life: 12 hex digits (48 bits) from the system's random source — two lives of one
    /// machine's hosts share an id with odds of about one in 10^14.
    public static func newLife() -> String {
        let bits = UInt64.random(in: 0..<(1 << 48))
        let digits = String(bits, radix: 16)
        return String(repeating: "0", count: 12 - digits.count) + digits
    }

    static func isLife(_ text: Substring) -> Bool {
        text.count == 12 && text.allSatisfy { $0.isASCII && ($0.isNumber || ("a"..."f").contains($0)) }
    }

    public var description: String { life.map { "\($0):\(sequence)" } ?? String(sequence) }
}
