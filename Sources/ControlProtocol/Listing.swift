/// The answer to `listing` (``ListingRequest``): what a file watch knows exists under its root,
/// standing at the watch's event `sequence` (0: it posted none yet).
public struct Listing: CodableAnswer, Equatable {
    public static let type = "listing"

    public struct Entry: Codable, Equatable, Sendable {
        public var path: String
        public var isDirectory: Bool

        public init(path: String, isDirectory: Bool) {
            self.path = path
            self.isDirectory = isDirectory
        }

        enum CodingKeys: String, CodingKey {
            case path
            case isDirectory = "is_dir"
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

    enum CodingKeys: String, CodingKey {
        case root, source, entries
        case sequence = "seq"
        case rootExists = "root_exists"
    }
}
