import EventBusKit

/// When one event posted by the file source passed the source's stages (`CLOCK_MONOTONIC` ns),
/// for a latency breakdown: what `eventbus-bench files` prints. Its subscriber knows when it runs.
public struct FileStageRecord: Sendable {
    /// The bus sequence of the event: what joins this record with what a subscriber saw.
    public var sequence: UInt64
    /// When the `read(2)` that returned its inotify event returned (the event's own
    /// `monotonicNanoseconds`, unless a rename's pairing read further: see
    /// `FileChangeMonitor.movePartnerWait`; its events count from the read before them).
    public var read: UInt64
    /// When decoding, path resolution, the snapshot and rename pairing were done: the source was
    /// about to turn the change into an event.
    public var resolved: UInt64
}

/// Where the monitor's read path says when an event passes a stage.
///
/// Why a protocol the read path is generic over: the stamps cost a clock read and a store per
/// event, and a monitor that records none must not pay even a test per event. The read path is
/// specialized for each conformance; with ``NoStageStamps`` every call is empty and compiled away,
/// and which one runs is chosen once per read.
protocol StageStamping {
    func readReturned(at monotonic: UInt64)
    func resolved()
    func posted(sequence: UInt64)
}

/// The stamps of a monitor that records none (every monitor but a benchmark's).
struct NoStageStamps: StageStamping {
    @inline(__always) func readReturned(at monotonic: UInt64) {}
    @inline(__always) func resolved() {}
    @inline(__always) func posted(sequence: UInt64) {}
}

/// The stamps of a monitor made with `recordingStages`. Owned by the monitor's queue, like the
/// rest of its read path.
final class FileStageStamps: StageStamping {
    private var lastRead: UInt64 = 0
    private var lastResolved: UInt64 = 0
    private(set) var records: [FileStageRecord] = []

    func readReturned(at monotonic: UInt64) { lastRead = monotonic }
    func resolved() { lastResolved = MonotonicClock.now() }
    func posted(sequence: UInt64) {
        records.append(FileStageRecord(sequence: sequence, read: lastRead, resolved: lastResolved))
    }

    func take() -> [FileStageRecord] {
        defer { records = [] }
        return records
    }
}
