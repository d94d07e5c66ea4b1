import Glibc
import SystemCalls

/// CPU time of this process's threads, read from `/proc/self/task/*/schedstat` (nanoseconds on
/// a CPU, by the scheduler's own accounting), so a benchmark can say which thread spent what.
///
/// Why not `getrusage`: it gives the process's sum, and the benchmarks that run the host in
/// their own process need the host's threads apart from the benchmark's. Read with
/// `System.directoryEntries`/`readPrefix` because Foundation reads `/proc` files as empty.
struct ThreadTimes {
    /// Nanoseconds on a CPU and the thread's name (`comm`), by thread id.
    private(set) var threads: [Int32: (name: String, nanoseconds: UInt64)] = [:]

    /// The threads of this process now.
    static func now() -> ThreadTimes {
        var times = ThreadTimes()
        guard let names = try? System.directoryEntries("/proc/self/task") else { return times }
        for name in names {
            guard let thread = Int32(name),
                  let schedstat = read("/proc/self/task/\(thread)/schedstat"),
                  let nanoseconds = schedstat.split(separator: " ").first.flatMap({ UInt64($0) }) else { continue }
            let comm = read("/proc/self/task/\(thread)/comm").map { String($0.prefix { $0 != "\n" }) } ?? "?"
            times.threads[thread] = (comm, nanoseconds)
        }
        return times
    }

    /// Seconds each thread ran since `earlier` (threads that ended in between are missing).
    func since(_ earlier: ThreadTimes) -> [Int32: (name: String, seconds: Double)] {
        threads.reduce(into: [:]) { result, entry in
            let before = earlier.threads[entry.key]?.nanoseconds ?? 0
            result[entry.key] = (entry.value.name, Double(entry.value.nanoseconds &- before) / 1e9)
        }
    }

    /// CPU seconds the calling thread has run (`CLOCK_THREAD_CPUTIME_ID`).
    static func currentThread() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// The calling thread's id, from the `/proc/thread-self` link (`PID/task/TID`; Swift has no
    /// `gettid`, and `syscall` is variadic).
    static func currentThreadID() -> Int32? {
        var target = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/thread-self", &target, target.count - 1)
        guard length > 0 else { return nil }
        let link = String(decoding: target[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return link.split(separator: "/").last.flatMap { Int32($0) }
    }

    private static func read(_ path: String) -> String? {
        (try? System.readPrefix(path, count: 512)).map { String(decoding: $0, as: UTF8.self) }
    }
}
