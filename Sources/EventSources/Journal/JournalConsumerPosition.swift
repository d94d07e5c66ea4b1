@_spi(EventBusHost) import EventBusKit
import Foundation
import SystemCalls

/// A named consumer's persisted position: the cursor of the last entry it acknowledged, in
/// `<state directory>/<consumer>.cursor`.
///
/// Writes are atomic and durable: the cursor goes to a temporary file that is fsynced, then
/// renamed over the position, then the directory is fsynced. After a crash the file holds
/// either the old cursor or the new one, never a torn or empty one, and a returned
/// ``acknowledge(cursor:sequence:)`` survives power loss.
///
/// Threads: ``acknowledge(cursor:sequence:)`` runs on acknowledging subscribers' threads,
/// ``load()`` and ``close()`` on the reader's thread; a lock serialises them, so `close()` also
/// waits for an acknowledgement in flight (and the next reader of the file sees its result).
final class JournalConsumerPosition: JournalPositionKeeper, @unchecked Sendable {
    let consumer: String
    private let directory: String
    private let path: String
    private let lock = NSLock()
    // Guarded by `lock`.
    private var acknowledgedSequence: UInt64 = 0
    private var closed = false

    init(consumer: String, stateDirectory: String) {
        self.consumer = consumer
        self.directory = stateDirectory
        self.path = stateDirectory + "/" + consumer + ".cursor"
    }

    /// The persisted cursor, or nil if the consumer has none yet.
    func load() throws -> String? {
        guard let data = FileManager.default.contents(atPath: path) else {
            if System.isAccessible(path) { throw EventBusError(.acknowledgementFailed, "cannot read \(path)") }
            return nil
        }
        let cursor = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return cursor.isEmpty ? nil : cursor
    }

    func acknowledge(cursor: String, sequence: UInt64) throws {
        try lock.withLock {
            guard !closed else {
                throw EventBusError(.acknowledgementFailed, "the journal watch of consumer \(consumer) has stopped")
            }
            guard sequence > acknowledgedSequence else { return }
            try write(cursor)
            acknowledgedSequence = sequence
        }
    }

    /// Refuses further acknowledgements, after any in flight has been written.
    func close() {
        lock.withLock { closed = true }
    }

    private func write(_ cursor: String) throws {
        do {
            try DurableFile.replace(path, in: directory, with: cursor + "\n")
        } catch {
            throw EventBusError(.acknowledgementFailed, "cannot \(error.doing) for consumer \(consumer): \(journalErrorText(error.errno))")
        }
    }
}

/// Which running watch holds each consumer name, so two watches never write one position.
///
/// A watch that stops and starts again (the last subscriber leaves, a new one comes) can see
/// its predecessor — same source id — still finishing: it waits for it. A *different* watch
/// holding the name is a configuration error, reported as a `failed` status.
///
/// Threads: called from readers' threads.
final class JournalConsumerClaims: @unchecked Sendable {
    private let condition = NSCondition()
    // Guarded by `condition`.
    private var holders: [String: String] = [:]

    enum Outcome {
        case claimed
        case heldBy(String)
        case abandoned
    }

    func claim(_ consumer: String, for source: String, abandonWhen stopping: () -> Bool) -> Outcome {
        condition.lock()
        defer { condition.unlock() }
        while let holder = holders[consumer] {
            if holder != source { return .heldBy(holder) }
            if stopping() { return .abandoned }
            // Woken by `release`; the bound only lets a stop of this waiter be noticed.
            _ = condition.wait(until: Date(timeIntervalSinceNow: 0.05))
        }
        holders[consumer] = source
        return .claimed
    }

    func release(_ consumer: String) {
        condition.lock()
        holders[consumer] = nil
        condition.broadcast()
        condition.unlock()
    }
}
