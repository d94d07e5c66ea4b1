extension DecodingError {
    /// What went wrong, said of `subject` (`a status answer`) for a person to read: the member
    /// by its path and what was missing or found there — `a status answer needs "control.socket"`,
    /// `a status answer's "control.clients": expected an integer, found a string`.
    public func reading(_ subject: String) -> String {
        switch self {
        case .keyNotFound(let key, let context):
            return "\(subject) needs \"\(JSONKey.text(context.codingPath + [key]))\""
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            let member = context.codingPath.isEmpty ? "" : "'s \"\(JSONKey.text(context.codingPath))\""
            return "\(subject)\(member): \(context.debugDescription)"
        @unknown default:
            return "\(subject): \(self)"
        }
    }
}
