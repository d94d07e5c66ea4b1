import Glibc

extension System {
    /// Names the calling thread as `top -H`, perf and `/proc/PID/task/TID/comm` show it (the
    /// kernel keeps at most 15 bytes; longer names are cut here rather than refused).
    ///
    /// Why not Foundation's `Thread.name`: it passes the name to the kernel only when it can tell
    /// the thread is the current one, which a thread that names itself at its start loses to a
    /// race with the `start()` that created it; and the kernel refuses a name over 15 bytes, so
    /// the thread would keep its creator's name (a Dispatch worker's). `pthread_setname_np` is not
    /// in Swift's Glibc module; writing the thread's `comm` file is what it does on Linux.
    public static func nameCurrentThread(_ name: String) {
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }  // no /proc: the thread keeps its name, nothing else changes
        defer { close(fd) }
        let bytes = Array(name.utf8.prefix(15))
        bytes.withUnsafeBytes { try? writeAll(fd, $0, path: "/proc/thread-self/comm") }
    }
}
