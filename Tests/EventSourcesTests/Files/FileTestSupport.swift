import EventBusKit
@testable import EventSources
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

// Helpers of the file-change tests. Names carry a `File` prefix: the journal tests share this
// test target.

/// A scratch folder for file tests: on tmpfs when there is one (see ``TemporaryDirectory``).
func fileScratch() throws -> TemporaryDirectory {
    try TemporaryDirectory("eventbus-files", onTmpfs: true)
}

/// A fresh monitor (its own inotify instance, so one test's overflow is not another's) and a bus
/// with the files driver on it.
final class FileWatchHarness: @unchecked Sendable {
    let monitor = FileChangeMonitor()
    let bus = Bus()

    init() {
        FileSources.register(on: bus, monitor: monitor)
    }

    /// Subscribes to `watch` and returns once the source is armed: changes made after this
    /// returns are reported (attaching is asynchronous; `statistics` waits for the monitor's queue).
    func subscribe(_ watch: FileWatch) throws -> FileRecorder {
        let recorder = FileRecorder()
        recorder.cancellable = try bus.files(watch).sink { event in recorder.record(event) }
        _ = monitor.statistics
        return recorder
    }

    /// Kernel watches of this monitor's inotify instance, counted from `/proc/self/fdinfo`: one
    /// `inotify wd:` line per watch, as the kernel sees it.
    var kernelWatchLines: Int {
        let fd = monitor.inotifyDescriptor
        guard fd >= 0, let info = try? String(contentsOfFile: "/proc/self/fdinfo/\(fd)", encoding: .utf8) else { return 0 }
        return info.split(separator: "\n").filter { $0.hasPrefix("inotify wd:") }.count
    }
}

/// Records the file changes a subscription receives.
final class FileRecorder: @unchecked Sendable {
    private let changes = Mutex<[FileChange]>([])
    var cancellable: AnyCancellable?

    func record(_ event: Event) {
        guard let change = event.fileChange else { return }
        changes.withLock { $0.append(change) }
    }

    var all: [FileChange] { changes.withLock { $0 } }

    func of(_ kind: FileChange.Kind) -> [FileChange] { all.filter { $0.kind == kind } }

    func paths(_ kind: FileChange.Kind) -> Set<String> { Set(of(kind).map(\.path)) }

    func contains(_ kind: FileChange.Kind, _ path: String) -> Bool {
        all.contains { $0.kind == kind && $0.path == path }
    }

    func cancel() {
        cancellable?.cancel()
        cancellable = nil
    }
}

/// `open(O_CREAT) + close`, like `touch` of a new file: `IN_CREATE` then `IN_CLOSE_WRITE`.
func fileTouch(_ path: String) {
    let fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
    precondition(fd >= 0, "open \(path): \(errno)")
    close(fd)
}

/// Writes `text` through one `write` into an existing or new file.
func fileWrite(_ path: String, _ text: String) {
    let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0o644)
    precondition(fd >= 0, "open \(path): \(errno)")
    _ = text.withCString { write(fd, $0, strlen($0)) }
    close(fd)
}

func fileMkdir(_ path: String) {
    precondition(mkdir(path, 0o755) == 0, "mkdir \(path): \(errno)")
}

func fileRename(_ from: String, _ to: String) {
    precondition(rename(from, to) == 0, "rename \(from) \(to): \(errno)")
}

/// Sets a `/proc/sys` value and returns the old one, for a `defer` to restore.
func fileSetSysctl(_ path: String, _ value: Int) throws -> Int {
    let old = try #require(readProcInteger(path))
    try "\(value)\n".write(toFile: path, atomically: false, encoding: .utf8)
    return old
}
