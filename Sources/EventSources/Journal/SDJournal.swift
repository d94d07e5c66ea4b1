import CSystemd
import EventBusKit
import Foundation
import SystemCalls

/// One `sd_journal` handle: the thin layer over libsystemd the reader uses.
///
/// Threads: sd-journal handles are not thread-safe; each is created, used and closed on its
/// reader's thread only (see ``JournalSource``), hence not `Sendable`.
final class SDJournal {
    let handle: OpaquePointer

    /// Why a journal could not be opened; the reader reports it in a `journal.status` event.
    struct OpenFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// Opens the journal files of `location`. For the system journal and namespaces, "opened
    /// but there are no files and no journald to write any" counts as a failure: that is a
    /// machine without journald, where following would silently show nothing forever.
    init(_ location: JournalLocation) throws(OpenFailure) {
        var handle: OpaquePointer?
        let result: Int32
        switch location {
        case .system:
            result = sd_journal_open(&handle, Int32(SD_JOURNAL_LOCAL_ONLY | SD_JOURNAL_SYSTEM))
        case .directory(let path):
            result = sd_journal_open_directory(&handle, path, 0)
        case .namespace(let name):
            result = sd_journal_open_namespace(&handle, name, Int32(SD_JOURNAL_LOCAL_ONLY))
        }
        guard result >= 0, let handle else {
            throw OpenFailure(description: "cannot open the journal (\(location)): \(journalErrorText(-result))")
        }
        self.handle = handle
        switch location {
        case .system:
            try requireFilesOrDaemon(socket: "/run/systemd/journal/socket", what: "the system journal")
        case .namespace(let name):
            try requireFilesOrDaemon(socket: "/run/systemd/journal.\(name)/socket", what: "journal namespace \(name)")
        case .directory:
            break  // an empty directory is a journal that files will be written into
        }
    }

    private func requireFilesOrDaemon(socket: String, what: String) throws(OpenFailure) {
        var bytes: UInt64 = 0
        if sd_journal_get_usage(handle, &bytes) >= 0, bytes > 0 { return }
        if System.isAccessible(socket) { return }
        throw OpenFailure(description: "no journal: \(what) has no files and no journald listens at \(socket)")
    }

    deinit { sd_journal_close(handle) }

    /// Hands `match` to libsystemd: each term's matches with `sd_journal_add_match`, terms
    /// separated by `sd_journal_add_disjunction`.
    func add(_ match: JournalMatch) throws(OpenFailure) {
        for (index, term) in match.terms.enumerated() {
            if index > 0 { try check(sd_journal_add_disjunction(handle), "add a disjunction") }
            for string in term.matchStrings {
                let result = string.withCString { sd_journal_add_match(handle, $0, 0) }
                try check(result, "add the match \(string)")
            }
        }
    }

    private func check(_ result: Int32, _ doing: String) throws(OpenFailure) {
        if result < 0 { throw OpenFailure(description: "cannot \(doing): \(journalErrorText(-result))") }
    }

    func seekHead() throws(OpenFailure) { try check(sd_journal_seek_head(handle), "seek to the head") }

    /// The cursor of the last entry (of those the current match selects), or nil when there is none.
    func lastCursor() throws(OpenFailure) -> String? {
        try check(sd_journal_seek_tail(handle), "seek to the tail")
        let result = sd_journal_previous(handle)
        try check(result, "step back from the tail")
        return result > 0 ? cursor() : nil
    }

    /// The realtime (µs since the epoch) of the last entry the current match selects, or nil when
    /// there is none. Leaves the handle there: the caller moves it back.
    func lastRealtime() throws(OpenFailure) -> UInt64? {
        try check(sd_journal_seek_tail(handle), "seek to the tail")
        let result = sd_journal_previous(handle)
        try check(result, "step back from the tail")
        var realtime: UInt64 = 0
        guard result > 0, sd_journal_get_realtime_usec(handle, &realtime) >= 0 else { return nil }
        return realtime
    }

    func seek(realtimeMicroseconds: UInt64) throws(OpenFailure) {
        try check(sd_journal_seek_realtime_usec(handle, realtimeMicroseconds), "seek to a time")
    }

    /// False for a cursor string libsystemd cannot parse.
    func seek(cursor: String) -> Bool {
        cursor.withCString { sd_journal_seek_cursor(handle, $0) } >= 0
    }

    /// Whether the current entry is the one at `cursor`.
    func isAt(cursor: String) -> Bool {
        cursor.withCString { sd_journal_test_cursor(handle, $0) } > 0
    }

    /// Moves to the next matching entry: true if there is one, false at the end.
    func next() throws(OpenFailure) -> Bool {
        let result = sd_journal_next(handle)
        if result < 0 { throw OpenFailure(description: "reading the journal failed: \(journalErrorText(-result))") }
        return result > 0
    }

    /// Waits up to `microseconds` for the journal to change (new entries, new or removed files),
    /// processing its inotify events: without this, a reader never sees rotated-in files.
    func wait(microseconds: UInt64) throws(OpenFailure) {
        let result = sd_journal_wait(handle, microseconds)
        if result < 0 { throw OpenFailure(description: "waiting on the journal failed: \(journalErrorText(-result))") }
    }

    /// The current entry's cursor.
    func cursor() -> String? {
        var cursor: UnsafeMutablePointer<CChar>?
        guard sd_journal_get_cursor(handle, &cursor) >= 0, let cursor else { return nil }
        defer { free(cursor) }
        return String(cString: cursor)
    }
}

/// `strerror` text for an errno value (libsystemd returns them negated).
func journalErrorText(_ code: Int32) -> String { String(cString: strerror(code)) }
