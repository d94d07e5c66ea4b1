@_spi(EventBusHost) import EventBusKit
import Foundation
import SystemCalls

/// A small file in the host's state directory, written the way journal consumer positions are:
/// to a temporary file that is fsynced, renamed over the old one, then the directory fsynced.
/// After a crash (SIGKILL, power loss) it holds the old content or the new, never a torn one.
///
/// Threads: each file has one writer (the bridge thread that owns it).
struct StateFile {
    let directory: String
    let path: String

    init(directory: String, name: String) {
        self.directory = directory
        self.path = directory + "/" + name
    }

    func read() throws(BridgeError) -> String? {
        do {
            return String(decoding: try System.readFile(path), as: UTF8.self)
        } catch where error.isNoSuchFile {
            return nil
        } catch {
            throw BridgeError(.state, "cannot read \(path): \(error.reason)")
        }
    }

    func write(_ text: String) throws(BridgeError) {
        do {
            try DurableFile.replace(path, in: directory, with: text)
        } catch {
            throw BridgeError(.state, "cannot \(error.doing): \(String(cString: strerror(error.errno)))")
        }
    }
}

/// Which run of this host's bridge this is: part of every exported event's identity.
///
/// The bus numbers events from 1 again after every restart, so (host, sequence) alone would
/// name two different events after a restart — and JetStream's duplicate window would silently
/// drop the second as a "duplicate". Each start takes a new instance number, larger than every
/// earlier one: the wall clock in nanoseconds, or the last instance + 1 if the clock went back,
/// persisted before the first export. (host, instance, sequence) is unique for good and ordered:
/// a later run's events sort after an earlier run's.
enum BridgeInstance {
    static func next(stateDirectory: String, host: String) throws(BridgeError) -> UInt64 {
        let file = StateFile(directory: stateDirectory, name: "bridge-\(host).instance")
        let last = try file.read().flatMap { UInt64($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 0
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let clock = UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
        let instance = max(clock, last + 1)
        try file.write("\(instance)\n")
        return instance
    }
}
