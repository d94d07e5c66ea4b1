import CSystemd
@_spi(EventBusHost) import EventBusKit
import Foundation
import Synchronization
import SystemCalls

/// The shared reader behind every subscription to one ``JournalWatch``: one sd_journal handle
/// (one inotify instance, which are scarce: 128 per user here) and one thread, started with the
/// first subscriber and closed after the last one leaves.
///
/// ## Threads
/// - `start` and `stop` run on whatever thread subscribes or cancels (the bus calls them).
/// - The source's own *reader thread* owns the sd_journal handle: opening, positioning,
///   `sd_journal_next` / `sd_journal_wait`, and copying each entry's fields into a batch.
/// - Its ``JournalPostingStage`` (a serial queue) turns batches into events and calls
///   `bus.post`, in reading order, while the reader reads on: subscribers without a mailbox are
///   called there (or on the thread that is running the bus's delivery loop at the time);
///   modules get their events on their mailbox.
/// - Acknowledgements (``Bus/acknowledge(_:)``) run on the acknowledging subscriber's thread,
///   in ``JournalConsumerPosition``.
///
/// ## Following
/// The reader drains `sd_journal_next` and, at the end, waits in `sd_journal_wait` with a short
/// timeout (``JournalDriver/Configuration/pollInterval``). The wait processes the handle's
/// inotify events, so rotated-in files are picked up; the timeout matters because journald
/// batches its inotify notifications behind a 250 ms timer, while the entries themselves are
/// in the shared mapping at once — a pure inotify wait would add 150–500 ms of latency
/// (docs/platform-facts.md, The journal). The timeout also bounds how long `stop` waits for the thread.
///
/// ## Position
/// The reader remembers the cursor of the last entry it posted. It starts (and restarts after
/// a journal failure) right after that cursor, else after the consumer's persisted position,
/// else where ``JournalWatch/start`` says (`tail` is made a cursor too: the last entry when the
/// reader opened). Resuming seeks to the cursor and steps onto the entry
/// there: when `sd_journal_test_cursor` confirms it is that entry, it was delivered already and
/// is skipped; when not, the entry is gone (vacuumed) and a `journal.gap` precedes the entry
/// found instead.
///
/// ## Lag
/// How far behind the journal's tail the source is (``JournalLag``, read by the host's
/// metrics) is published per batch through atomics; while reading a backlog the reader looks the
/// tail up on its own handle at most once a second (``lookAtTail(_:_:)``), never per entry.
///
/// ## Pace
/// The reader reads as fast as the posting stage posts (at most a few batches ahead); neither
/// sees subscribers' demand (the bus buffers per subscription and announces drops with
/// `bus.gap`). A watch from the head of a large journal into a slow module can lose entries to
/// those drops; a consumer that sees a `bus.gap` and does not acknowledge past it gets them
/// again when its watch restarts.
final class JournalSource: EventSource, @unchecked Sendable {
    let id: String
    private let watch: JournalWatch
    private let configuration: JournalDriver.Configuration
    private let claims: JournalConsumerClaims
    /// How far behind the tail it is (see ``JournalLag``), listed in the configuration's
    /// ``JournalLags`` while the source runs.
    let lag: JournalLag

    private let stopping = Atomic<Bool>(false)
    /// Signalled by `stop` to cut a retry pause short.
    private let wake = DispatchSemaphore(value: 0)
    /// Signalled by the reader thread when it has finished.
    private let exited = DispatchSemaphore(value: 0)
    private enum Phase {
        case idle
        case running(JournalPostingStage)
        case stopped
    }
    private let stateLock = NSLock()
    // Guarded by `stateLock`.
    private var state = Phase.idle

    // Owned by the reader thread.
    private var lastPosted: String?
    private var lastStatus: JournalStatus?
    /// The realtime of the entry at `lastPosted`: the tail, when the reader is at the end.
    private var lastPostedRealtime: UInt64?
    /// When a reader behind the tail next looks it up (``lookAtTail(_:_:)``).
    private var nextTailLook = ContinuousClock.now

    init(id: String, watch: JournalWatch, configuration: JournalDriver.Configuration, claims: JournalConsumerClaims) {
        self.id = id
        self.watch = watch
        self.configuration = configuration
        self.claims = claims
        self.lag = JournalLag(watch: watch)
    }

    func start(posting bus: Bus) {
        stateLock.withLock {
            // The bus may stop a source before starting it when its only subscriber cancels at once.
            guard case .idle = state else { return }
            let stage = JournalPostingStage(source: id, bus: bus, lag: lag)
            if case .failure(let error) = startDetachedThread({ self.run(bus: bus, stage: stage) }) {
                state = .stopped
                bus.post(JournalStatus(state: .failed, reason: "cannot start a reader thread: \(error.reason)")
                    .event(source: id))
                return
            }
            state = .running(stage)
            configuration.lags?.add(lag)
        }
    }

    /// Returns once the source has posted its last event and the reader thread has released
    /// the consumer position — except when called *on* the posting stage (a subscriber
    /// cancelling inside its delivery), where waiting would deadlock: the stage then posts
    /// nothing more, and the reader finishes on its own.
    func stop() {
        let stage: JournalPostingStage? = stateLock.withLock {
            defer { state = .stopped }
            configuration.lags?.remove(lag)
            if case .running(let stage) = state { return stage }
            return nil
        }
        stopping.store(true, ordering: .releasing)
        wake.signal()
        guard let stage else { return }
        stage.stop()
        guard !stage.isCurrent else { return }
        exited.wait()
        stage.drain()
    }

    private var isStopping: Bool { stopping.load(ordering: .acquiring) }

    // MARK: The reader thread

    private func run(bus: Bus, stage: JournalPostingStage) {
        defer { exited.signal() }
        // Here, on the thread that sets it: no status of a stopped source is left behind.
        defer { configuration.statuses?.remove(id) }
        Thread.current.name = "journal-reader"  // the OS thread name: what `top -H` and perf show
        guard let consumer = watch.consumer else {
            follow(stage, persisted: nil)
            return
        }
        switch claims.claim(consumer, for: id, abandonWhen: { isStopping }) {
        case .abandoned:
            return
        case .heldBy(let other):
            fail("consumer \(consumer) is in use by another watch (\(other)); a consumer name belongs to one watch", stage)
            return
        case .claimed:
            break
        }
        defer { claims.release(consumer) }
        let position = JournalConsumerPosition(consumer: consumer, stateDirectory: configuration.stateDirectory)
        let persisted: String?
        do {
            persisted = try position.load()
        } catch {
            fail("cannot read the position of consumer \(consumer): \(error)", stage)
            return
        }
        bus.attachJournalPosition(position, source: id)
        defer {
            bus.detachJournalPosition(position, source: id)
            position.close()
        }
        follow(stage, persisted: persisted)
    }

    /// Opens, positions and follows until stopped; after a failure, reports it and retries.
    private func follow(_ stage: JournalPostingStage, persisted: String?) {
        let reader = JournalEntryReader(fields: watch.fields)
        let poll = UInt64(configuration.pollInterval.clampedNanoseconds / 1000)
        var batch = JournalEntryBatch()
        var atEnd = false
        while !isStopping {
            do throws(SDJournal.OpenFailure) {
                let journal = try SDJournal(watch.location)
                let (deliverCurrent0, start) = try position(journal, persisted: persisted, stage: stage)
                var deliverCurrent = deliverCurrent0
                post(JournalStatus(state: .following, reason: "following \(watch.location), \(start)"), stage)
                while !isStopping {
                    var found = deliverCurrent
                    if !found { found = try journal.next() }
                    deliverCurrent = false
                    if found {
                        if atEnd {
                            atEnd = false
                            lag.leftEnd()
                        }
                        if reader.read(journal, into: &batch) && batch.isFull {
                            handOver(&batch, to: stage)
                            if ContinuousClock.now >= nextTailLook { deliverCurrent = try lookAtTail(journal, stage) }
                        }
                    } else {
                        handOver(&batch, to: stage)  // at the end: nothing waits behind a part-filled batch
                        if !atEnd {
                            atEnd = true
                            lag.reachedEnd(lastRealtime: lastPostedRealtime)
                        }
                        try journal.wait(microseconds: poll)
                    }
                }
            } catch {
                handOver(&batch, to: stage)  // what was read before the failure, then the notice
                if atEnd {
                    atEnd = false
                    lag.leftEnd()
                }
                let retry = configuration.retryInterval
                post(JournalStatus(state: .unavailable, reason: error.description, retryAfterSeconds: retry.secondsValue),
                     stage)
                _ = wake.wait(timeout: .now() + DispatchTimeInterval(retry))
            }
        }
    }

    /// Hands a non-empty batch to the posting stage; remembers the last cursor handed over:
    /// that is where a restart after a failure resumes.
    private func handOver(_ batch: inout JournalEntryBatch, to stage: JournalPostingStage) {
        guard !batch.isEmpty else { return }
        lastPosted = batch.lastCursor
        lastPostedRealtime = batch.entries.last?.realtime
        lag.handedOver(batch.entries.count, firstRealtime: batch.entries[0].realtime)
        stage.handOver(&batch)
    }

    /// Reads the realtime of the newest entry the match selects into ``lag`` — the handle's one
    /// user is this thread, so it moves there and back — and returns to right after the last
    /// entry handed over (see ``resume(_:after:gapsTo:)``, whose result it returns). Called at
    /// most once per ``JournalLag/lookInterval``, after a full batch: a few bisections of the
    /// journal's files.
    private func lookAtTail(_ journal: SDJournal, _ stage: JournalPostingStage) throws(SDJournal.OpenFailure) -> Bool {
        nextTailLook = ContinuousClock.now.advanced(by: JournalLag.lookInterval)
        guard let cursor = lastPosted else { return false }
        if let realtime = try journal.lastRealtime() { lag.tail(realtime: realtime) }
        return try resume(journal, after: cursor, gapsTo: stage)
    }

    /// Adds the watch's match to `journal` and positions it for the first `next`. Returns true
    /// when the entry it is already on must be delivered first, and where it starts, for the
    /// `following` status: a saved consumer position overrides the watch's `start`, and the
    /// status says which applied (the watch's own description shows only its `start`).
    private func position(_ journal: SDJournal, persisted: String?,
                          stage: JournalPostingStage) throws(SDJournal.OpenFailure) -> (Bool, String) {
        let resumed: (cursor: String, from: String)?
        if let lastPosted {
            resumed = (lastPosted, "resumed after the last entry it posted")
        } else if let persisted, let consumer = watch.consumer {
            resumed = (persisted, "resumed after consumer \(consumer)'s saved position")
        } else if case .afterCursor(let start) = watch.start {
            resumed = (start, "started after the given cursor")
        } else {
            resumed = nil
        }
        if let resumed {
            try journal.add(watch.match)
            let deliverCurrent = try resume(journal, after: resumed.cursor, gapsTo: stage)
            return (deliverCurrent, "\(resumed.from) (\(JournalCursor.describe(resumed.cursor))\(deliverCurrent ? "; that entry is gone: see the journal.gap" : ""))")
        }
        let noPosition = watch.consumer.map { "; consumer \($0) had no saved position" } ?? ""
        return (try position(journal, from: watch.start), "started at \(Self.describe(watch.start))\(noPosition)")
    }

    private static func describe(_ start: JournalStart) -> String {
        switch start {
        case .tail: "the tail (entries written from now on)"
        case .head: "the head (the oldest entry)"
        case .since(let date): "the first entry at or after \(date.formatted(.iso8601))"
        case .afterCursor(let cursor): "the entry after \(JournalCursor.describe(cursor))"
        }
    }

    /// Positions a journal that has no cursor to resume after at the watch's `start`.
    private func position(_ journal: SDJournal, from start: JournalStart) throws(SDJournal.OpenFailure) -> Bool {
        switch start {
        case .tail:
            // "After the last entry" must be a fixed place: sd-journal's own tail is not. When no
            // entry matches yet, seek_tail + previous has nothing to step back onto and the
            // handle stays at a floating tail, from which next() skips entries written until
            // journald next notifies (measured: the first ~90 entries of a burst lost). So find
            // the last entry of all before adding the match, and resume after it.
            let last = try journal.lastCursor()
            try journal.add(watch.match)
            guard let last else {
                try journal.seekHead()  // an empty journal: everything in it will be new
                return false
            }
            return try resume(journal, after: last, gapsTo: nil)
        case .head, .afterCursor:
            try journal.add(watch.match)
            try journal.seekHead()
        case .since(let date):
            try journal.add(watch.match)
            try journal.seek(realtimeMicroseconds: UInt64(max(0, date.timeIntervalSince1970 * 1e6)))
        }
        return false
    }

    /// Positions `journal` right after the entry at `cursor`: seeks to it and steps onto the
    /// first matching entry there. If that is the entry at the cursor (`sd_journal_test_cursor`),
    /// it was delivered already and the next `next` moves past it. If not, the cursor's entry is
    /// gone: a `journal.gap` is posted through `stage` (nil: the cursor was only a starting
    /// mark) and the entry stepped onto is delivered first (returns true).
    private func resume(_ journal: SDJournal, after cursor: String, gapsTo stage: JournalPostingStage?) throws(SDJournal.OpenFailure) -> Bool {
        if !journal.seek(cursor: cursor) { try journal.seekHead() }  // unparsable: from the oldest
        let found = try journal.next()
        if found && journal.isAt(cursor: cursor) { return false }
        if let stage {
            let resumed = found ? journal.cursor() : nil
            stage.post(JournalGap(lostCursor: cursor, resumedCursor: resumed,
                                skippedSequenceNumbers: resumed.flatMap { JournalCursor.seqnumsBetween(cursor, $0) })
                .event(source: id))
        }
        return found
    }

    /// Posts a status when it differs from the last one posted, so a retry loop does not repeat
    /// the same notice every few seconds.
    private func post(_ status: JournalStatus, _ stage: JournalPostingStage) {
        guard status != lastStatus else { return }
        lastStatus = status
        configuration.statuses?.set(status, for: id)
        stage.post(status.event(source: id))
    }

    /// A watch that cannot run: says so once and idles until stopped.
    private func fail(_ reason: String, _ stage: JournalPostingStage) {
        post(JournalStatus(state: .failed, reason: reason), stage)
        while !isStopping { wake.wait() }
    }
}

/// The parts of a cursor string libsystemd documents as stable enough to compare:
/// `s=` the sequence-number id (one per journald writer) and `i=` the sequence number (hex).
enum JournalCursor {
    /// `entry i=1f3 written 2026-11-29T07:50:01Z` — the sequence number and the wall-clock
    /// time (`t=`, microseconds) a person can place — or the cursor as it is.
    static func describe(_ cursor: String) -> String {
        var seqnum: Substring?
        var realtime: UInt64?
        for item in cursor.split(separator: ";") {
            if item.hasPrefix("i=") { seqnum = item.dropFirst(2) }
            if item.hasPrefix("t=") { realtime = UInt64(item.dropFirst(2), radix: 16) }
        }
        guard let seqnum, let realtime else { return "cursor \(cursor)" }
        let written = Date(timeIntervalSince1970: Double(realtime) / 1e6).formatted(.iso8601)
        return "entry i=\(seqnum) written \(written)"
    }

    static func seqnumsBetween(_ from: String, _ to: String) -> UInt64? {
        guard let a = parts(from), let b = parts(to), a.id == b.id, b.seqnum > a.seqnum else { return nil }
        return b.seqnum - a.seqnum - 1
    }

    private static func parts(_ cursor: String) -> (id: Substring, seqnum: UInt64)? {
        var id: Substring?
        var seqnum: UInt64?
        for item in cursor.split(separator: ";") {
            if item.hasPrefix("s=") { id = item.dropFirst(2) }
            if item.hasPrefix("i=") { seqnum = UInt64(item.dropFirst(2), radix: 16) }
        }
        guard let id, let seqnum else { return nil }
        return (id, seqnum)
    }
}
