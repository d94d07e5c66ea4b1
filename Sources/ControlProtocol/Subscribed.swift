/// The answer to `subscribe`: the subscription as the host took it, and where its stream
/// starts. `event` and `gap` lines follow.
public struct Subscribed: Equatable, Sendable {
    /// The patterns, as the host reads them.
    public var patterns: [String]
    /// What the replay buffer held when the feed joined.
    public var oldestSequence: Int64
    public var newestSequence: Int64
    /// When its oldest event was posted, microseconds since the epoch (nil: it held none).
    public var oldestTime: Int64?
    /// This client's buffer: events, and bytes of events.
    public var buffer: Int64
    public var bufferBytes: Int64
    /// The client's own sources, as asked (empty: none).
    public var files: [String] = []
    public var journal: [String] = []
    public var devices: [String] = []
    public var units: [String] = []
    /// Sources of the other kinds, by kind, as asked.
    public var sources: [String: [String]] = [:]
    /// A `since_time` replay that cannot be whole: events posted after that time were already
    /// evicted.
    public var replayIncomplete = false
    /// The host's life (``EventCursor``).
    public var life: String?
    /// `since_seq` counted in an earlier life (the request's `life` is not this host's): the
    /// stream starts at this life's first event it still holds instead; what was posted between
    /// the two lives is not replayed.
    public var sinceEarlierLife = false

    public init(patterns: [String], oldestSequence: Int64, newestSequence: Int64, oldestTime: Int64?,
                buffer: Int64, bufferBytes: Int64) {
        self.patterns = patterns
        self.oldestSequence = oldestSequence
        self.newestSequence = newestSequence
        self.oldestTime = oldestTime
        self.buffer = buffer
        self.bufferBytes = bufferBytes
    }

    public var json: JSON {
        var answer: [String: JSON] = [
            "type": "subscribed",
            "patterns": .array(patterns.map(JSON.string)),
            "oldest_seq": .int(oldestSequence),
            "newest_seq": .int(newestSequence),
            "buffer": .int(buffer),
            "buffer_bytes": .int(bufferBytes),
        ]
        for (name, list) in [("files", files), ("journal", journal), ("devices", devices), ("units", units)] where !list.isEmpty {
            answer[name] = .array(list.map(JSON.string))
        }
        if !sources.isEmpty { answer["sources"] = .object(sources.mapValues { .array($0.map(JSON.string)) }) }
        if let oldestTime { answer["oldest_time"] = .int(oldestTime) }
        if replayIncomplete { answer["replay_incomplete"] = .bool(true) }
        if let life { answer["life"] = .string(life) }
        if sinceEarlierLife { answer["since_earlier_life"] = .bool(true) }
        return .object(answer)
    }

    init(_ members: Members) throws(ResponseDecodingError) {
        func strings(_ name: String) -> [String] { (members[name]?.arrayValue ?? []).compactMap(\.stringValue) }
        patterns = strings("patterns")
        oldestSequence = try members.int("oldest_seq")
        newestSequence = try members.int("newest_seq")
        oldestTime = members["oldest_time"]?.intValue
        buffer = members["buffer"]?.intValue ?? 0
        bufferBytes = members["buffer_bytes"]?.intValue ?? 0
        files = strings("files")
        journal = strings("journal")
        devices = strings("devices")
        units = strings("units")
        sources = (members["sources"]?.objectValue ?? [:]).mapValues { ($0.arrayValue ?? []).compactMap(\.stringValue) }
        replayIncomplete = members["replay_incomplete"]?.boolValue ?? false
        life = members["life"]?.stringValue
        sinceEarlierLife = members["since_earlier_life"]?.boolValue ?? false
    }
}
