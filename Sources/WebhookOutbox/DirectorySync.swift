import Foundation
import SystemCalls

/// `fsync` of the outbox's folder, shared by the enqueues that need one at the same time (group
/// commit): a rename is durable only once its folder is synced, and one `fsync` covers every
/// rename made before it started. An enqueue that finds a sync running waits for the next one
/// and lets it cover itself and whoever else renamed meanwhile, so N threads enqueuing at once
/// pay about two folder syncs between them, not N.
final class DirectorySync: @unchecked Sendable {
    // @unchecked: every var is touched only under `condition`'s lock.
    private let descriptor: Int32
    private let path: String
    private let condition = NSCondition()
    /// Renames done (numbered from 1), and the highest number a finished sync covers.
    private var renamed: UInt64 = 0
    private var synced: UInt64 = 0
    private var syncing = false

    init(descriptor: Int32, path: String) {
        self.descriptor = descriptor
        self.path = path
    }

    /// Returns once the folder has been synced after the caller's rename (made before this call).
    func sync() throws(System.CallError) {
        condition.lock()
        renamed += 1
        let mine = renamed
        while true {
            if synced >= mine {
                condition.unlock()
                return
            }
            if !syncing { break }
            condition.wait()
        }
        syncing = true
        let covers = renamed
        condition.unlock()
        var failure: System.CallError?
        do { _ = try System.call("fsync", path) { fsync(descriptor) } } catch { failure = error }
        condition.lock()
        syncing = false
        if failure == nil { synced = max(synced, covers) }
        condition.broadcast()
        condition.unlock()
        if let failure { throw failure }
    }
}
