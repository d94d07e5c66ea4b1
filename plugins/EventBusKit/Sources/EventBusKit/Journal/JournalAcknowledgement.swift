/// The host's side of a consumer position (``JournalWatch/consumer``): persists the cursor of
/// the last acknowledged entry so a restarted watch resumes right after it.
public protocol JournalPositionKeeper: AnyObject, Sendable {
    /// Makes `cursor` — of the entry the watch posted with bus sequence `sequence` — the
    /// persisted position, durably, before returning; an acknowledgement of an entry older than
    /// the persisted one changes nothing. Called on the acknowledging subscriber's thread.
    func acknowledge(cursor: String, sequence: UInt64) throws
}

/// Running watches' position keepers, by bus and source id.
///
/// Why a table in the SDK: module code acknowledges through its own ``Bus`` handle and the
/// entry, while the keeper lives in the host's journal driver, which the SDK cannot name. A
/// keeper is in the table exactly while its watch runs, and a running watch keeps its bus
/// alive, so a key never outlives the bus it names.
private let positionKeepers = Locked<[PositionKey: any JournalPositionKeeper]>([:])

private struct PositionKey: Hashable {
    let bus: ObjectIdentifier
    let source: String
}

extension Bus {
    /// Acknowledges `entry` and every entry its watch delivered before it: once this returns,
    /// the watch's consumer position is persisted, and a watch with the same consumer started
    /// later — in this process or after a restart, even after SIGKILL — delivers exactly the
    /// entries after it. Unacknowledged entries are delivered again then.
    ///
    /// Durable (written to a temporary file, fsynced, renamed over the old position), so it
    /// costs a disk sync: acknowledge after each batch of work, not necessarily every entry.
    /// Call it while subscribed; it runs on the calling thread.
    ///
    /// Throws ``EventBusError/Code/acknowledgementFailed`` when the entry's watch has no
    /// consumer name, is no longer running, or the position cannot be written.
    public func acknowledge(_ entry: JournalEntry) throws {
        if let remote = core.remote {
            // A module worker: the host's watch keeps the position.
            try remote.acknowledge(source: entry.source, cursor: entry.cursor, sequence: entry.sequence)
            return
        }
        try acknowledgeJournal(source: entry.source, cursor: entry.cursor, sequence: entry.sequence)
    }

    /// ``acknowledge(_:)`` by the entry's parts: what the host does for a module worker, which
    /// sends these three across.
    @_spi(EventBusHost) public func acknowledgeJournal(source: String, cursor: String, sequence: UInt64) throws {
        let key = PositionKey(bus: ObjectIdentifier(core), source: source)
        guard let keeper = positionKeepers.withLock({ $0[key] }) else {
            throw EventBusError(.acknowledgementFailed,
                "no running journal watch with a consumer name delivered this entry (source \(source))")
        }
        try keeper.acknowledge(cursor: cursor, sequence: sequence)
    }

    /// For the host's journal driver: routes acknowledgements of entries posted by the source
    /// `id` to `keeper` until ``detachJournalPosition(_:source:)``.
    public func attachJournalPosition(_ keeper: any JournalPositionKeeper, source id: String) {
        positionKeepers.withLock { $0[PositionKey(bus: ObjectIdentifier(core), source: id)] = keeper }
    }

    /// Stops routing acknowledgements for `id` to `keeper`. Leaves a keeper attached since by a
    /// successor of the same id (a watch restarted while its predecessor was still finishing).
    public func detachJournalPosition(_ keeper: any JournalPositionKeeper, source id: String) {
        let key = PositionKey(bus: ObjectIdentifier(core), source: id)
        positionKeepers.withLock { keepers in
            if keepers[key] === keeper { keepers[key] = nil }
        }
    }
}
