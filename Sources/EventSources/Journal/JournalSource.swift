import CSystemd
import EventBusKit
import Foundation
import Synchronization

/// The shared reader behind every subscription to one ``JournalWatch``: one sd_journal handle
/// (one inotify instance, which are scarce: 128 per user here) and one thread, started with the
/// first subscriber and closed after the last one leaves.
///
/// ## Threads
/// - `start` and `stop` run on whatever thread subscribes or cancels (the bus calls them).
/// - Everything else runs on the source's own *reader thread*: opening, positioning,
///   `sd_journal_next` / `sd_journal_wait`, decoding, and `bus.post`. Posting from the reader
///   thread means subscribers without a mailbox are called on it (or on the thread that is
///   running the bus's delivery loop at the time); modules get their events on their mailbox.
/// - Acknowledgements (``Bus/acknowledge(_:)``) run on the acknowledging subscriber's thread,
///   in ``JournalConsumerPosition``.
///
/// ## Following
/// The reader drains `sd_journal_next` and, at the end, waits in `sd_journal_wait` with a short
/// timeout (``JournalDriver/Configuration/pollInterval``). The wait processes the handle's
/// inotify events, so rotated-in files are picked up; the timeout matters because journald
/// batches its inotify notifications behind a 250 ms timer, while the entries themselves are
/// in the shared mapping at once — a pure inotify wait would add 150–500 ms of latency
/// (DESIGN.md §4). The timeout also bounds how long `stop` waits for the thread.
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
/// ## Pace
/// The reader posts as fast as it reads; it does not see subscribers' demand (the bus buffers
/// per subscription and announces drops with `bus.gap`). A watch from the head of a large
/// journal into a slow module can lose entries to those drops; a consumer that sees a
/// `bus.gap` and does not acknowledge past it gets them again when its watch restarts.
final class JournalSource: EventSource, @unchecked Sendable {
    let id: String
    private let watch: JournalWatch
    private let configuration: JournalDriver.Configuration
    private let claims: JournalConsumerClaims

    private let stopping = Atomic<Bool>(false)
    /// Signalled by `stop` to cut a retry pause short.
    private let wake = DispatchSemaphore(value: 0)
    /// Signalled by the reader thread when it has finished.
    private let exited = DispatchSemaphore(value: 0)
    private enum Phase {
        case idle
        case running(pthread_t)
        case stopped
    }
    private let stateLock = NSLock()
    // Guarded by `stateLock`.
    private var state = Phase.idle

    // Owned by the reader thread.
    private var lastPosted: String?
    private var lastStatus: JournalStatus?

    init(id: String, watch: JournalWatch, configuration: JournalDriver.Configuration, claims: JournalConsumerClaims) {
        self.id = id
        self.watch = watch
        self.configuration = configuration
        self.claims = claims
    }

    func start(posting bus: Bus) {
        stateLock.withLock {
            // The bus may stop a source before starting it when its only subscriber cancels at once.
            guard case .idle = state else { return }
            var thread = pthread_t()
            let context = Unmanaged.passRetained(ReaderStart(source: self, bus: bus))
            let result = pthread_create(&thread, nil, { raw in
                let start = Unmanaged<ReaderStart>.fromOpaque(raw!).takeRetainedValue()
                start.source.run(bus: start.bus)
                return nil
            }, context.toOpaque())
            guard result == 0 else {
                context.release()
                state = .stopped
                bus.post(JournalStatus(state: .failed, reason: "cannot start a reader thread: \(journalErrorText(result))")
                    .event(source: id))
                return
            }
            pthread_detach(thread)
            state = .running(thread)
        }
    }

    /// Returns once the reader thread has posted its last event and released the consumer
    /// position — except when called *on* the reader thread (a subscriber cancelling inside
    /// its delivery), where waiting would deadlock: the thread then posts nothing more and
    /// finishes as soon as the delivery returns.
    func stop() {
        let reader: pthread_t? = stateLock.withLock {
            defer { state = .stopped }
            if case .running(let thread) = state { return thread }
            return nil
        }
        stopping.store(true, ordering: .releasing)
        wake.signal()
        if let reader, pthread_equal(reader, pthread_self()) == 0 { exited.wait() }
    }

    private var isStopping: Bool { stopping.load(ordering: .acquiring) }

    // MARK: The reader thread

    private func run(bus: Bus) {
        defer { exited.signal() }
        Thread.current.name = "journal-reader"  // the OS thread name: what `top -H` and perf show
        guard let consumer = watch.consumer else {
            follow(bus: bus, persisted: nil)
            return
        }
        switch claims.claim(consumer, for: id, abandonWhen: { isStopping }) {
        case .abandoned:
            return
        case .heldBy(let other):
            fail("consumer \(consumer) is in use by another watch (\(other)); a consumer name belongs to one watch", bus: bus)
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
            fail("cannot read the position of consumer \(consumer): \(error)", bus: bus)
            return
        }
        bus.attachJournalPosition(position, source: id)
        defer {
            bus.detachJournalPosition(position, source: id)
            position.close()
        }
        follow(bus: bus, persisted: persisted)
    }

    /// Opens, positions and follows until stopped; after a failure, reports it and retries.
    private func follow(bus: Bus, persisted: String?) {
        while !isStopping {
            do throws(SDJournal.OpenFailure) {
                let journal = try SDJournal(watch.location)
                var deliverCurrent = try position(journal, persisted: persisted, bus: bus)
                post(JournalStatus(state: .following, reason: "following \(watch.location)"), bus: bus)
                var reader = JournalEntryReader(fields: watch.fields)
                let poll = configuration.pollInterval.microseconds
                while !isStopping {
                    var found = deliverCurrent
                    if !found { found = try journal.next() }
                    deliverCurrent = false
                    if found {
                        guard let event = reader.event(from: journal, source: id) else { continue }
                        lastPosted = event.fields["cursor"]?.stringValue
                        bus.post(event)
                    } else {
                        try journal.wait(microseconds: poll)
                    }
                }
            } catch {
                let retry = configuration.retryInterval
                post(JournalStatus(state: .unavailable, reason: error.description, retryAfterSeconds: retry.seconds),
                     bus: bus)
                _ = wake.wait(timeout: .now() + .nanoseconds(Int(clamping: retry.nanoseconds)))
            }
        }
    }

    /// Adds the watch's match to `journal` and positions it for the first `next`. Returns true
    /// when the entry it is already on must be delivered first.
    private func position(_ journal: SDJournal, persisted: String?, bus: Bus) throws(SDJournal.OpenFailure) -> Bool {
        var cursor = lastPosted ?? persisted
        if cursor == nil, case .afterCursor(let start) = watch.start { cursor = start }
        if let cursor {
            try journal.add(watch.match)
            return try resume(journal, after: cursor, bus: bus)
        }
        switch watch.start {
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
            return try resume(journal, after: last, bus: nil)
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
    /// gone: a `journal.gap` is posted on `bus` (nil: the cursor was only a starting mark) and
    /// the entry stepped onto is delivered first (returns true).
    private func resume(_ journal: SDJournal, after cursor: String, bus: Bus?) throws(SDJournal.OpenFailure) -> Bool {
        if !journal.seek(cursor: cursor) { try journal.seekHead() }  // unparsable: from the oldest
        let found = try journal.next()
        if found && journal.isAt(cursor: cursor) { return false }
        if let bus {
            let resumed = found ? journal.cursor() : nil
            bus.post(JournalGap(lostCursor: cursor, resumedCursor: resumed,
                                skippedSequenceNumbers: resumed.flatMap { JournalCursor.seqnumsBetween(cursor, $0) })
                .event(source: id))
        }
        return found
    }

    /// Posts a status when it differs from the last one posted, so a retry loop does not repeat
    /// the same notice every few seconds.
    private func post(_ status: JournalStatus, bus: Bus) {
        guard status != lastStatus else { return }
        lastStatus = status
        bus.post(status.event(source: id))
    }

    /// A watch that cannot run: says so once and idles until stopped.
    private func fail(_ reason: String, bus: Bus) {
        post(JournalStatus(state: .failed, reason: reason), bus: bus)
        while !isStopping { wake.wait() }
    }
}

/// What the reader thread starts with.
private final class ReaderStart {
    let source: JournalSource
    let bus: Bus
    init(source: JournalSource, bus: Bus) {
        self.source = source
        self.bus = bus
    }
}

/// The parts of a cursor string libsystemd documents as stable enough to compare:
/// `s=` the sequence-number id (one per journald writer) and `i=` the sequence number (hex).
enum JournalCursor {
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

fileprivate extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
    var microseconds: UInt64 { UInt64(max(0, nanoseconds / 1000)) }
    var seconds: Double { Double(nanoseconds) / 1e9 }
}
