/// Durable imports: tells, for an event that arrives at or behind the last one taken in from its
/// origin, a copy the stream stored twice from an event stored late.
///
/// The exporter publishes so that the stream stores an origin's events in its order
/// (``OutstandingPublishes``), and the server drops a re-published message id within its
/// duplicate window. A stream can still hold an event twice — re-published after an outage
/// longer than `duplicate_window`, or by a server that lost its id window — and, rarely, late —
/// a cluster that refused a publish and took the next one (a stream leader changing between the
/// two), or a publish on a new connection before the exporter learned the old one broke. The
/// first must be dropped, the second posted.
///
/// So the importer remembers, per origin host, the sequences of the last ``size`` events it
/// took in from that origin's current instance (in memory, for this run). An event at or behind
/// the origin's last is a duplicate if remembered, late (posted, counted as out of order) if it
/// is newer than the oldest one remembered and not among them, and otherwise a duplicate: at or
/// behind what this host recorded, beyond what it remembers — after a restart, everything at or
/// behind the recorded position. That last rule is where a late event could be dropped: one more
/// than ``size`` events of its origin late, or arriving just after this host restarted; both need
/// a publish refused inside a cluster and the next one stored (see docs/fleet-durability.md).
///
/// Threads: the durable importer's thread only.
struct OriginWindow {
    /// Events remembered per origin: more than nats.c's window of unacknowledged publishes
    /// (4 096), the farthest a late event can be behind.
    static let size = 4_096 + 1_024

    enum Verdict {
        /// After the origin's last: take it.
        case inOrder
        /// Behind the origin's last and not taken before: take it, counted as out of order.
        case late
        /// Taken before (or at or behind the recorded position, beyond what is remembered): drop.
        case duplicate
    }

    private struct Recent {
        var instance: UInt64
        var sequences: [UInt64] = []
        var next = 0
    }

    private var origins: [String: Recent] = [:]

    /// Judges an origin's event against the last one taken in (`last`, from the ledger).
    func judge(host: String, instance: UInt64, sequence: UInt64, last: ImportLedger.Position?) -> Verdict {
        guard let last, (instance, sequence) <= (last.instance, last.sequence) else { return .inOrder }
        guard let recent = origins[host], recent.instance == instance, let oldest = recent.sequences.min(),
              sequence > oldest else { return .duplicate }
        return recent.sequences.contains(sequence) ? .duplicate : .late
    }

    /// Remembers an event taken in.
    mutating func taken(host: String, instance: UInt64, sequence: UInt64) {
        var recent = origins[host] ?? Recent(instance: instance)
        origins[host] = nil  // uniquely referenced while it changes
        if recent.instance != instance { recent = Recent(instance: instance) }
        if recent.sequences.count < Self.size {
            recent.sequences.append(sequence)
        } else {
            recent.sequences[recent.next] = sequence
            recent.next = (recent.next + 1) % Self.size
        }
        origins[host] = recent
    }
}
