extension Event {
    /// What one event costs a buffer that holds it, in bytes: an estimate of both its memory and
    /// its `event` line, for the byte budgets of a module's ``Mailbox``, and of the host's replay
    /// ring and each control client's buffer.
    ///
    /// The UTF-8 lengths of the name, the source, each field's key and each string value, plus
    /// fixed overheads for the rest (the line's keys, sequence, times; a field's quotes and
    /// punctuation, a number or date). Deterministic — an event has the same size wherever it is
    /// counted, so what a buffer adds on the way in it subtracts exactly on the way out — and
    /// cheap: a native string knows its UTF-8 length, nothing is encoded. It is not the exact
    /// line length (escapes make a line longer), but it is within a small factor of both the line
    /// and the heap it pins, which is all a budget of megabytes needs.
    @_spi(EventBusHost) public var estimatedBytes: Int {
        var bytes = Self.eventOverhead + name.utf8.count + source.utf8.count
        for (key, value) in fields {
            bytes += Self.fieldOverhead + key.utf8.count
            if case .string(let text) = value { bytes += text.utf8.count } else { bytes += Self.scalarValueBytes }
        }
        return bytes
    }

    /// The line's fixed part (`{"type":"event","seq":…,"time":"…","mono":…,"fields":{}}`, about
    /// 130 bytes) rounded up for the event's own storage.
    private static let eventOverhead = 160
    /// Quotes, colon and comma of a field, rounded up for its slot in the dictionary.
    private static let fieldOverhead = 32
    /// An integer, double, boolean or date written out (a date is 29 bytes).
    private static let scalarValueBytes = 32
}
