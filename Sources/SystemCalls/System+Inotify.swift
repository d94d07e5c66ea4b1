import Glibc

extension System {
    /// The inotify calls of the files source: an instance, and watches on it. Reading the events
    /// is ``read(_:into:path:)`` on the instance's descriptor, parsing them the source's own.
    public enum Inotify {
        /// A new inotify instance, non-blocking and close-on-exec. `EMFILE` both for the per-user
        /// instance limit and for the process's descriptor limit.
        public static func create() throws(CallError) -> Int32 {
            try call("inotify_init1", "inotify") { inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC)) }
        }

        /// `inotify_add_watch(2)`: the watch descriptor, the same for an inode already watched
        /// on `instance` (whose mask `mask` then replaces).
        public static func addWatch(_ instance: Int32, _ path: String, mask: UInt32) throws(CallError) -> Int32 {
            try call("inotify_add_watch", path) { inotify_add_watch(instance, path, mask) }
        }

        /// `inotify_rm_watch(2)`; `EINVAL` when the kernel removed it already (its inode is gone).
        public static func removeWatch(_ watch: Int32, from instance: Int32) throws(CallError) {
            _ = try call("inotify_rm_watch", "watch \(watch)") { inotify_rm_watch(instance, watch) }
        }
    }
}
