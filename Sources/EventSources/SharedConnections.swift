import Synchronization

/// A connection several sources share: stopped once the last of them has let go.
protocol SharedConnection: AnyObject, Sendable {
    func stop()
}

/// One connection per key (a systemd manager, a D-Bus bus), opened with the first source that
/// asks for it and stopped after the last one releases it; the units and the D-Bus drivers keep
/// theirs here. Any thread.
final class SharedConnections<Key: Hashable & Sendable, Connection: SharedConnection>: Sendable {
    /// Per key: its connection and the ids of the sources attached to it.
    private let entries = Mutex<[Key: (connection: Connection, sources: [String])]>([:])
    private let open: @Sendable (Key) -> Connection

    init(open: @escaping @Sendable (Key) -> Connection) {
        self.open = open
    }

    /// How many connections are open.
    var count: Int { entries.withLock { $0.count } }

    /// Each open connection with the ids of the sources attached to it.
    var attached: [(connection: Connection, sources: [String])] { entries.withLock { Array($0.values) } }

    /// `key`'s connection, opened if `source` is the first to ask.
    func acquire(_ key: Key, for source: String) -> Connection {
        entries.withLock { entries in
            if var entry = entries[key] {
                entry.sources.append(source)
                entries[key] = entry
                return entry.connection
            }
            let connection = open(key)
            entries[key] = (connection, [source])
            return connection
        }
    }

    /// Detaches `source`; the connection stops (outside the lock) when it was the last.
    func release(_ key: Key, for source: String) {
        let closing: Connection? = entries.withLock { entries in
            guard var entry = entries[key] else { return nil }
            if let index = entry.sources.firstIndex(of: source) { entry.sources.remove(at: index) }
            if !entry.sources.isEmpty {
                entries[key] = entry
                return nil
            }
            entries[key] = nil
            return entry.connection
        }
        closing?.stop()
    }
}
