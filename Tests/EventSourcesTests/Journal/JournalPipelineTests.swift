import EventBusKit
import EventSources
import Foundation
import Testing

/// The journal source reads on one thread and posts on another (its posting stage), handing over
/// batches of entries; these tests cross batch boundaries and stop the source in the awkward
/// places: inside a delivery, and while the reader waits for the stage to make room.
@Suite("Journal: reader thread and posting stage")
struct JournalPipelineTests {
    /// More entries than several batches hold, in journal files written without a daemon.
    static let count = 5000

    static func journalFolder() throws -> TemporaryDirectory {
        let folder = try TemporaryDirectory("eventbus-journal-test")
        try journalWriteFile(folder.path + "/a.journal", messages: (0..<count).map { "p\($0)" }, identifier: "pipe")
        return folder
    }

    /// A bus with the journal driver, and the publisher of every entry of ``journalFolder()``
    /// from the head. Keep the rig while subscribed: it owns the folders.
    struct Rig {
        let folder: TemporaryDirectory
        let state: TemporaryDirectory
        let bus = Bus()
        let entries: EventPublisher

        init() throws {
            folder = try JournalPipelineTests.journalFolder()
            state = try TemporaryDirectory("eventbus-journal-state")
            JournalDriver.register(on: bus, stateDirectory: state.path)
            entries = try bus.journal(from: .directory(folder.path), start: .head)
        }
    }

    @Test("from the head across many batches: every entry once, in order, with all its fields")
    func manyBatches() async throws {
        let folder = try Self.journalFolder()
        let standard = try JournalRecorder()
        try standard.follow(JournalWatch(match: .identifier("pipe"), location: .directory(folder.path), start: .head))
        let everything = try JournalRecorder()
        try everything.follow(JournalWatch(location: .directory(folder.path), start: .head, fields: .everything))
        #expect(await eventually { standard.entries.count == Self.count && everything.entries.count == Self.count })
        #expect(standard.messages == (0..<Self.count).map { "p\($0)" })
        #expect(Set(standard.entries.map(\.cursor)).count == Self.count, "each entry its own cursor")
        #expect(standard.entries.allSatisfy { $0.identifier == "pipe" && $0.priority == .info && $0.fields.isEmpty })
        #expect(everything.entries.enumerated().allSatisfy { index, entry in
            entry.fields["MESSAGE"] == "p\(index)" && entry.fields["SYSLOG_IDENTIFIER"] == "pipe"
                && entry.fields["_BOOT_ID"] == "0123456789abcdef0123456789abcdef"
        })
        #expect(standard.gaps.isEmpty && everything.gaps.isEmpty)
    }

    @Test("a subscriber that cancels inside a delivery: nothing more is delivered, and the source stops")
    func cancelInsideDelivery() async throws {
        let rig = try Rig()
        let holder = CancellableBox()
        let delivered = JournalCollected(0)
        let subscription = rig.entries.sink { event in
            guard event.journalEntry != nil else { return }
            if delivered.update({ $0 += 1; return $0 }) == 10 {
                holder.cancel()  // on the posting stage: must not wait for itself
            }
        }
        holder.hold(subscription)
        #expect(await eventually { rig.bus.statistics.sources.isEmpty })
        #expect(delivered.value == 10)
    }

    @Test("cancel while the reader waits for room behind a blocked subscriber: returns once the delivery ends, nothing after")
    func cancelWhileReaderWaits() async throws {
        let rig = try Rig()
        let inDelivery = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let cancelled = JournalCollected(false)
        let late = JournalCollected(0)
        let subscription = CancellableBox()
        subscription.hold(rig.entries.sink { event in
            guard event.journalEntry != nil else { return }
            if cancelled.value { late.update { $0 += 1 } }
            if event.sequence <= 2 {  // the first entry (after the `following` status): hold the stage
                inDelivery.signal()
                release.wait()
            }
        })
        inDelivery.wait()
        // The stage is blocked in a delivery, so the reader fills its batches and waits for room.
        let cancelReturned = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            subscription.cancel()
            cancelled.update { $0 = true }
            cancelReturned.signal()
        }
        // Let the cancel reach the source's stop (it cannot finish before the delivery ends, so
        // any interleaving is a valid run of this test; this only makes the interesting one likely).
        try await Task.sleep(for: .milliseconds(50))
        release.signal()  // the delivery in progress ends; cancel may now return
        #expect(await eventually { cancelReturned.wait(timeout: .now()) == .success })
        #expect(await eventually { rig.bus.statistics.subscriptions == 0 && rig.bus.statistics.sources.isEmpty })
        #expect(late.value == 0)
    }
}

/// A subscription that other threads (and its own sink) can cancel.
final class CancellableBox: @unchecked Sendable {
    private let lock = NSLock()
    private var cancellable: AnyCancellable?  // guarded by `lock`

    func hold(_ cancellable: AnyCancellable) { lock.withLock { self.cancellable = cancellable } }
    func cancel() { lock.withLock { cancellable }?.cancel() }
}
