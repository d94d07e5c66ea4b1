/// A `listing` request's members, typed (`PROTOCOL.md`, `listing`): the watched path and
/// whether the watch covers folders below it. Decoding checks the members and their kinds;
/// that the path is absolute and reachable by the client is the host's to check.
public struct ListingRequest: Equatable, Sendable {
    public var path: String
    public var recursive: Bool

    public init(path: String, recursive: Bool = false) {
        self.path = path
        self.recursive = recursive
    }

    private enum Member: String, CaseIterable {
        case path, recursive
    }

    /// Why a `listing` has no usable path: the same words whether it is missing or not absolute.
    public static let needsPath = ControlError.badRequest("listing needs \"path\": the absolute path of a watched file or folder")

    var members: [String: JSON] {
        var members: [String: JSON] = [Member.path.rawValue: .string(path)]
        if recursive { members[Member.recursive.rawValue] = .bool(true) }
        return members
    }

    /// Reads the members of a request line (`op` and `id` included).
    init(_ members: [String: JSON]) throws(ControlError) {
        for name in members.keys.sorted() where name != "op" && name != "id" && Member(rawValue: name) == nil {
            throw .badRequest("listing has no member \"\(name)\"; it takes \(Member.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard let path = members[Member.path.rawValue]?.stringValue else { throw Self.needsPath }
        self.path = path
        recursive = false
        if let value = members[Member.recursive.rawValue] {
            guard let flag = value.boolValue else { throw .badRequest("\"recursive\" must be true or false, found \(value.kindName)") }
            recursive = flag
        }
    }
}
