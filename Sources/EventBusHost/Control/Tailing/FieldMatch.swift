/// The values one field of a tail's `FIELD=VALUE` matches accepts: exact texts, as
/// `journalctl FIELD=VALUE` compares them, and globs for the values that hold `*` or `?`
/// (`path=/etc/nginx/*.conf`, `unit=app-?.service`).
///
/// journalctl has no globs, so a value with neither character means what it means there. A
/// backslash before `*` or `?` makes it literal (`title=\*` is a star); anywhere else it is
/// itself. Classes (`[a-z]`) are not supported: the match runs on the bus's delivery loop against
/// values up to a megabyte, and a glob of only `*` and `?` matches in one pass per segment (see
/// ``FieldGlob``), which no pattern can make exponential.
struct FieldMatch: Sendable, Equatable {
    var exact: Set<String> = []
    var globs: [FieldGlob] = []

    /// Adds `value`: a glob when it holds an unescaped `*` or `?`, else an exact text (with
    /// `\*` and `\?` read as `*` and `?`).
    mutating func add(_ value: String) {
        let glob = FieldGlob(value)
        if glob.isLiteral { exact.insert(glob.literal) } else if !globs.contains(glob) { globs.append(glob) }
    }

    @inline(__always)
    func accepts(_ text: String) -> Bool {
        if exact.contains(text) { return true }
        guard !globs.isEmpty else { return false }
        // The text's scalars once for all the field's globs.
        let scalars = Array(text.unicodeScalars)
        return globs.contains { $0.matches(scalars) }
    }
}

/// A glob of `*` (any run of characters, none included) and `?` (one character), compiled into
/// the fixed-length segments between its stars.
///
/// A segment's characters each match exactly one character, so the leftmost place a middle
/// segment fits is always the right one to take (it leaves the most room for the rest): matching
/// is one forward scan per segment, at most the text's length times the pattern's.
struct FieldGlob: Sendable, Equatable {
    /// One character of a segment: a literal, or `?`.
    enum Unit: Sendable, Equatable {
        case any
        case scalar(Unicode.Scalar)

        func matches(_ scalar: Unicode.Scalar) -> Bool {
            if case .scalar(let own) = self { own == scalar } else { true }
        }
    }

    /// Segments split at each `*`: the text starts with the first, ends with the last, and holds
    /// the middle ones in order. One segment: no star, the text is exactly it.
    private let segments: [[Unit]]

    init(_ pattern: String) {
        var segments: [[Unit]] = [[]]
        var scalars = pattern.unicodeScalars.makeIterator()
        while let scalar = scalars.next() {
            switch scalar {
            case "*": segments.append([])
            case "?": segments[segments.count - 1].append(.any)
            case "\\":
                var next = scalars
                if let escaped = next.next(), escaped == "*" || escaped == "?" {
                    scalars = next
                    segments[segments.count - 1].append(.scalar(escaped))
                } else {
                    segments[segments.count - 1].append(.scalar(scalar))
                }
            default: segments[segments.count - 1].append(.scalar(scalar))
            }
        }
        self.segments = segments
    }

    /// Characters the pattern compares (stars not counted): what one place in a text can cost.
    var length: Int { segments.reduce(0) { $0 + $1.count } }

    /// Whether the pattern has no `*` or `?`: it matches one text only.
    var isLiteral: Bool {
        segments.count == 1 && !segments[0].contains(.any)
    }

    /// The one text a literal pattern matches.
    var literal: String {
        var text = String.UnicodeScalarView()
        for case .scalar(let scalar) in segments[0] { text.append(scalar) }
        return String(text)
    }

    /// Whether the text whose Unicode scalars are `scalars` matches.
    func matches(_ scalars: [Unicode.Scalar]) -> Bool {
        let first = segments[0]
        guard segments.count > 1 else {
            return scalars.count == first.count && fits(first, scalars, at: 0)
        }
        let last = segments[segments.count - 1]
        guard scalars.count >= first.count + last.count,
              fits(first, scalars, at: 0),
              fits(last, scalars, at: scalars.count - last.count) else { return false }
        var start = first.count
        let end = scalars.count - last.count
        for segment in segments[1..<(segments.count - 1)] where !segment.isEmpty {
            guard let found = firstPlace(of: segment, in: scalars, from: start, before: end) else { return false }
            start = found + segment.count
        }
        return true
    }

    private func fits(_ segment: [Unit], _ scalars: [Unicode.Scalar], at offset: Int) -> Bool {
        for (index, unit) in segment.enumerated() where !unit.matches(scalars[offset + index]) { return false }
        return true
    }

    private func firstPlace(of segment: [Unit], in scalars: [Unicode.Scalar], from start: Int, before end: Int) -> Int? {
        var offset = start
        while offset + segment.count <= end {
            if fits(segment, scalars, at: offset) { return offset }
            offset += 1
        }
        return nil
    }
}
