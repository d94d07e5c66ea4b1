/// A member name or a list index in the coding path of a ``JSON`` tree being encoded or decoded
/// (`JSON(encoding:)`, `JSON.decode(_:)`): what their errors name.
struct JSONKey: CodingKey {
    let stringValue: String
    let intValue: Int?

    init(stringValue: String) {
        self.stringValue = stringValue
        intValue = nil
    }

    init(index: Int) {
        stringValue = "\(index)"
        intValue = index
    }

    init?(intValue: Int) { self.init(index: intValue) }

    /// `path` as a reader writes it: `control.replay.held`, `modules[2].name`.
    static func text(_ path: [any CodingKey]) -> String {
        path.enumerated().map { index, key in
            if let position = key.intValue { return "[\(position)]" }
            return index == 0 ? key.stringValue : "." + key.stringValue
        }.joined()
    }
}
