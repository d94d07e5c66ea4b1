/// The answer to `listing` (``ListingRequest``): what a file watch knows exists under its root,
/// standing at the watch's event `sequence` (0: it posted none yet).
public struct Listing: Equatable, Sendable {
    public struct Entry: Equatable, Sendable {
        public var path: String
        public var isDirectory: Bool

        public init(path: String, isDirectory: Bool) {
            self.path = path
            self.isDirectory = isDirectory
        }
    }

    public var root: String
    /// The source that answered (its kind and options), as `status` names it.
    public var source: String
    public var sequence: UInt64
    /// False for a root deleted or not yet created: the listing is then empty.
    public var rootExists: Bool
    public var entries: [Entry]

    public init(root: String, source: String, sequence: UInt64, rootExists: Bool, entries: [Entry]) {
        self.root = root
        self.source = source
        self.sequence = sequence
        self.rootExists = rootExists
        self.entries = entries
    }

    public var json: JSON {
        ["type": "listing", "root": .string(root), "source": .string(source), "seq": .int(Int64(bitPattern: sequence)),
         "root_exists": .bool(rootExists),
         "entries": .array(entries.map { ["path": .string($0.path), "is_dir": .bool($0.isDirectory)] })]
    }

    init(_ members: Members) throws(ResponseDecodingError) {
        root = try members.string("root")
        source = members["source"]?.stringValue ?? ""
        sequence = UInt64(clamping: try members.int("seq"))
        rootExists = members["root_exists"]?.boolValue ?? true
        entries = try members.array("entries").map { (entry) throws(ResponseDecodingError) in
            guard let path = entry["path"]?.stringValue else {
                throw ResponseDecodingError(description: "a listing entry needs \"path\", a string")
            }
            return Entry(path: path, isDirectory: entry["is_dir"]?.boolValue ?? false)
        }
    }
}
