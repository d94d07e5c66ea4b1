import Foundation
import SystemCalls

/// The process's own figures, read from `/proc/self` when scraped: what an operator checks
/// first when a service misbehaves (memory, descriptors, threads, CPU).
public struct ProcessFigures: Sendable {
    public var residentBytes: UInt64
    public var virtualBytes: UInt64
    public var openFileDescriptors: Int
    public var maxFileDescriptors: UInt64
    public var threads: Int
    public var cpuSeconds: Double
    /// Seconds since the epoch the process started.
    public var startTime: Double

    /// Nil when `/proc/self` cannot be read (not Linux, or `/proc` not mounted).
    public static func read() -> ProcessFigures? {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // After "pid (comm) ": state is field 3; utime 14, stime 15, num_threads 20, starttime 22,
        // vsize 23, rss 24 (pages). comm may hold spaces and parentheses, hence the last ')'.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        func field(_ number: Int) -> UInt64 { UInt64(fields[number - 3]) ?? 0 }
        guard fields.count >= 22 else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let page = UInt64(sysconf(Int32(_SC_PAGESIZE)))
        return ProcessFigures(
            residentBytes: field(24) * page,
            virtualBytes: field(23),
            openFileDescriptors: Self.openDescriptorCount() ?? 0,
            maxFileDescriptors: UInt64(System.openFileLimit().soft),
            threads: Int(field(20)),
            cpuSeconds: Double(field(14) + field(15)) / ticks,
            startTime: bootTime() + Double(field(22)) / ticks)
    }

    /// How many descriptors the process has open (the entries of `/proc/self/fd`, less the one
    /// reading it); nil when that cannot be read — which, when descriptors have run out, is
    /// itself the answer.
    public static func openDescriptorCount() -> Int? {
        guard let entries = try? System.directoryEntries("/proc/self/fd") else { return nil }
        return max(0, entries.count - 1)  // the descriptor opendir itself holds
    }

    private static func bootTime() -> Double {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("btime ") {
            return Double(line.dropFirst(6)) ?? 0
        }
        return 0
    }
}
