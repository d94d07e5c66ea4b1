import EventBusKit
import Synchronization

/// How far one journal source is behind the journal's tail: what the metrics scrape reads.
///
/// The reader thread is the only one that touches the sd_journal handle, so these are figures
/// it (and its posting stage) publish through atomics, per batch — never per entry:
/// - the *tail*: the realtime of the newest entry the watch's match selects. At the end of the
///   journal that is the last entry read; while reading a backlog the reader looks it up
///   (`sd_journal_seek_tail` + `previous`, then back to where it was) at most once a second,
///   after handing over a full batch (``lookInterval``).
/// - the *posted* side: the realtime of the last entry the posting stage has posted on the bus
///   (before any is posted, of the first entry handed over: the oldest one still waiting).
/// - whether it is *caught up*: the reader is at the end of the journal and the stage has posted
///   every entry handed to it.
///
/// Entries behind the tail are not given: counting them means stepping through them (libsystemd
/// keeps no count per match), and sequence numbers count every entry of the journal, not those
/// the match selects. Seconds behind and "caught up" are exact as of the last look.
///
/// ## Threads
/// ``handedOver(_:firstRealtime:)``, ``reachedEnd(lastRealtime:)``, ``leftEnd()`` and
/// ``tail(realtime:)`` on the reader thread; ``posted(_:lastRealtime:)`` on the posting stage's
/// queue; ``figures`` on any thread.
public final class JournalLag: Sendable {
    /// The watch the source follows (its options: the bus's source id is made from them).
    public let watch: JournalWatch

    /// How often at most a reader behind the tail looks the tail up.
    static let lookInterval: Duration = .seconds(1)

    private let tailRealtime = Atomic<UInt64>(0)
    private let postedRealtime = Atomic<UInt64>(0)
    private let handed = Atomic<UInt64>(0)
    private let postedCount = Atomic<UInt64>(0)
    private let atEnd = Atomic<Bool>(false)

    init(watch: JournalWatch) {
        self.watch = watch
    }

    /// The figures as of now.
    public struct Figures: Sendable, Equatable {
        /// The realtime of the newest entry (as of the last look) minus that of the last entry
        /// posted, in seconds; 0 when caught up or nothing is known of the tail yet.
        public var seconds: Double
        /// At the end of the journal with every entry read posted on the bus.
        public var caughtUp: Bool
        /// Entries posted on the bus since the source started.
        public var posted: UInt64
    }

    public var figures: Figures {
        // Read in the opposite order of writing: at the end, after posting everything handed over.
        let end = atEnd.load(ordering: .acquiring)
        let handed = handed.load(ordering: .acquiring)
        let posted = postedCount.load(ordering: .acquiring)
        let caughtUp = end && posted == handed
        let tail = tailRealtime.load(ordering: .relaxed)
        let delivered = postedRealtime.load(ordering: .relaxed)
        let seconds = caughtUp || tail == 0 || delivered == 0 || tail <= delivered ? 0 : Double(tail - delivered) / 1e6
        return Figures(seconds: seconds, caughtUp: caughtUp, posted: posted)
    }

    func handedOver(_ count: Int, firstRealtime: UInt64) {
        _ = postedRealtime.compareExchange(expected: 0, desired: firstRealtime, ordering: .relaxed)
        handed.add(UInt64(count), ordering: .releasing)
    }

    func posted(_ count: Int, lastRealtime: UInt64) {
        postedRealtime.store(lastRealtime, ordering: .relaxed)
        postedCount.add(UInt64(count), ordering: .releasing)
    }

    func tail(realtime: UInt64) {
        tailRealtime.store(realtime, ordering: .relaxed)
    }

    /// The reader found no next entry; `lastRealtime` is the last one it read (nil: none yet).
    func reachedEnd(lastRealtime: UInt64?) {
        if let lastRealtime { tailRealtime.store(lastRealtime, ordering: .relaxed) }
        atEnd.store(true, ordering: .releasing)
    }

    /// The reader found an entry after being at the end.
    func leftEnd() {
        atEnd.store(false, ordering: .releasing)
    }
}

/// The running journal sources' lag, for metrics: a driver given one (``JournalDriver/Configuration/lags``)
/// lists each source it makes here while the source runs.
///
/// Threads: any.
public final class JournalLags: Sendable {
    private let running = Mutex<[ObjectIdentifier: JournalLag]>([:])

    public init() {}

    /// The lag of every running source.
    public var all: [JournalLag] { running.withLock { Array($0.values) } }

    func add(_ lag: JournalLag) { running.withLock { $0[ObjectIdentifier(lag)] = lag } }
    func remove(_ lag: JournalLag) { running.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(lag)) } }
}

/// The last ``JournalStatus`` of every running journal source, by the bus's source id: what
/// `eventbus status` shows beside each source, so "the journal is unavailable here" is in the
/// status and not only in a `journal.status` event that whoever was not tailing missed.
///
/// ## Threads
/// Written by each source's reader thread (and its `stop`), read from any thread.
public final class JournalStatuses: Sendable {
    private let statuses = Mutex<[String: JournalStatus]>([:])

    public init() {}

    /// Source id → its last status.
    public var all: [String: JournalStatus] { statuses.withLock { $0 } }

    func set(_ status: JournalStatus, for source: String) { statuses.withLock { $0[source] = status } }
    func remove(_ source: String) { statuses.withLock { _ = $0.removeValue(forKey: source) } }
}
