/// What a file watch knows exists under its root at one point of the event stream: how a
/// subscriber that missed events (a `bus.gap` in its stream, or an `fs.overflow`) becomes whole
/// again without replaying them.
///
/// The listing is taken on the thread that posts the watch's events, between two of them, and
/// says which was the last: ``sequence``. So a subscriber replaces its picture with ``entries``,
/// then keeps applying the events it receives whose `sequence` is greater, and ignores the
/// others (the listing holds them already). Why a listing rather than a replay: after an
/// overflow the difference can be hundreds of thousands of events (an `rm -rf` makes 229k deletes
/// in 0.5 s), more than any buffer or the host's replay ring holds; the listing costs what the tree
/// holds, once, when the subscriber asks for it, at its own pace.
///
/// The host serves it (`FileChangeMonitor.listing(of:)`, the control socket's `listing`
/// request, `eventbus files PATH`); a plain `Bus()` has no file watches.
public struct FileListing: Sendable, Hashable {
    public struct Entry: Sendable, Hashable {
        /// Absolute, below the root (the root itself when the watch is on a file).
        public var path: String
        public var isDirectory: Bool

        public init(path: String, isDirectory: Bool) {
            self.path = path
            self.isDirectory = isDirectory
        }
    }

    /// The watched root.
    public var root: String
    /// The id of the watch's source (`files:/srv recursive`).
    public var source: String
    /// The bus sequence of the last event the watch posted before the listing was taken (0 if
    /// none): the listing includes it and everything before it.
    public var sequence: UInt64
    /// Whether the root exists and is watched (a root deleted or not yet created lists nothing).
    public var rootExists: Bool
    /// Sorted by path, so a parent comes before its contents.
    public var entries: [Entry]
    /// Set when the tree holds more than the watch's ``FileWatch/entryLimit``: the watch has
    /// stopped and lists nothing, which says nothing about whether the root exists.
    public var exceededEntryLimit: Int?

    public init(root: String, source: String, sequence: UInt64, rootExists: Bool, entries: [Entry],
                exceededEntryLimit: Int? = nil) {
        self.root = root
        self.source = source
        self.sequence = sequence
        self.rootExists = rootExists
        self.entries = entries
        self.exceededEntryLimit = exceededEntryLimit
    }
}
