import EventBusKit

/// What a durable import has taken in, persisted in the host's state directory so a restart
/// (SIGKILL included) resumes exactly after it.
///
/// - `streamSequence`: the stream sequence of the last message taken in. At start and after
///   every reconnect the bridge re-creates its consumer to deliver from `streamSequence + 1`, so
///   delivery is always in stream order; a redelivered message (sequence ≤ it) is dropped and
///   acknowledged. The stream sequence, not the origin's, identifies a redelivery: it is unique
///   in the stream, while an exporter's re-send after a lost acknowledgement may land behind newer
///   events of the same origin.
/// - `origins`: the last (instance, sequence) taken in per origin host, for status and to judge
///   an event at or behind it (``OriginWindow``): a copy the stream stored twice is dropped, an
///   event stored late is posted and counted as out of order. After a restart, an event at or
///   behind the recorded origin position is a copy.
///
/// Written (atomically, fsynced) *after* the batch it covers is posted on the bus, then the
/// batch is acknowledged: the file never names an event the bus was not given, so a crash loses
/// nothing the stream stored. A crash between posting and writing makes the next start post that
/// batch again — on a new bus, which never saw it. Within a run, the ledger in memory (ahead of
/// the file after a failed write) drops every redelivery by its stream sequence.
///
/// Threads: the durable importer's thread; copies go to the ``PositionRecorder``'s queue, which
/// writes them.
struct ImportLedger: Equatable {
    struct Position: Equatable {
        var instance: UInt64
        var sequence: UInt64
    }

    var streamSequence: UInt64 = 0
    var origins: [String: Position] = [:]
    /// Whether there is a recorded position at all (a host's first start has none).
    var isEmpty: Bool { streamSequence == 0 && origins.isEmpty }

    /// `stream N` then `origin HOST INSTANCE SEQUENCE` lines.
    var text: String {
        var lines = ["stream \(streamSequence)"]
        for host in origins.keys.sorted() {
            let position = origins[host]!
            lines.append("origin \(host) \(position.instance) \(position.sequence)")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    init() {}

    init(text: String, file: String) throws(BridgeError) {
        for (index, line) in text.split(separator: "\n").enumerated() {
            let words = line.split(separator: " ")
            if words.count == 2, words[0] == "stream", let sequence = UInt64(words[1]) {
                streamSequence = sequence
            } else if words.count == 4, words[0] == "origin", let instance = UInt64(words[2]), let sequence = UInt64(words[3]) {
                origins[String(words[1])] = Position(instance: instance, sequence: sequence)
            } else {
                throw BridgeError(.state, "\(file):\(index + 1): cannot read the import position \"\(line)\"; remove the file to start from the stream's newest event")
            }
        }
    }

    /// Records an origin's event; returns false if it is not after the last one recorded for
    /// that host (arrived out of its origin's order).
    @discardableResult
    mutating func record(host: String, instance: UInt64, sequence: UInt64) -> Bool {
        let position = Position(instance: instance, sequence: sequence)
        guard let last = origins[host] else {
            origins[host] = position
            return true
        }
        guard (instance, sequence) > (last.instance, last.sequence) else { return false }
        origins[host] = position
        return true
    }
}
