import EventBusKit
import EventSources
import Foundation
#if canImport(Glibc)
import Glibc
import SystemCalls
#endif

// Files at scale: what a folder's rename and removal cost the watch as the number of watched
// paths grows (the anchor is the same operation with nothing else watched), and whether an
// `rm -rf` of a large tree overflows the kernel's queue. The snapshot's folder index is what keeps
// both flat: without it each folder operation scans every watched path (13–14 ms per rename and
// 10.5 ms per removal at 153k paths, and `rm -rf` of a large tree overflows every time).

/// Counts what a recursive watch reports, by kind, from the monitor's thread.
final class FolderRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var counts: [FileChange.Kind: Int] = [:]
    private var directoriesDeleted = 0

    func record(_ event: Event) {
        guard let change = event.fileChange else { return }
        lock.withLock {
            counts[change.kind, default: 0] += 1
            if change.kind == .deleted && change.isDirectory { directoriesDeleted += 1 }
        }
    }

    func count(_ kind: FileChange.Kind) -> Int { lock.withLock { counts[kind] ?? 0 } }
    var deletedDirectories: Int { lock.withLock { directoriesDeleted } }
}

/// `files` empty files under `directory/tree`, in folders of 1000.
func makeTree(in directory: String, files: Int) {
    let tree = directory + "/tree"
    mkdir(tree, 0o755)
    for folder in 0..<(files + 999) / 1000 {
        let path = "\(tree)/d\(folder)"
        mkdir(path, 0o755)
        for file in 0..<min(1000, files - folder * 1000) {
            let fd = open("\(path)/f\(file)", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
            if fd >= 0 { close(fd) }
        }
    }
}

/// Waits until `condition` holds, or `timeout` seconds; false on timeout.
func awaitCondition(timeout: Double = 60, _ condition: () -> Bool) -> Bool {
    let start = MonotonicClock.now()
    while !condition() {
        if Double(MonotonicClock.now() - start) / 1e9 > timeout { return false }
        System.sleep(for: .microseconds(200))
    }
    return true
}

/// Per-folder rename and removal (ms) with `watched` other paths in the tree.
func folderOperations(watched: Int, folders: Int, base: String) -> (rename: Double, removal: Double, overflows: Int) {
    let directory = makeStormDirectory(in: base)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    if watched > 0 { makeTree(in: directory, files: watched) }
    let small = directory + "/small"
    mkdir(small, 0o755)
    for folder in 0..<folders {
        mkdir("\(small)/s\(folder)", 0o755)
        for file in 0..<10 {
            let fd = open("\(small)/s\(folder)/f\(file)", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
            if fd >= 0 { close(fd) }
        }
    }
    let monitor = FileChangeMonitor()
    let bus = Bus()
    FileSources.register(on: bus, monitor: monitor)
    let recorder = FolderRecorder()
    let sink = try! bus.files(at: directory, recursive: true).sink { recorder.record($0) }
    defer { sink.cancel() }
    _ = monitor.statistics  // armed: the initial scan is done

    var start = MonotonicClock.now()
    for folder in 0..<folders { rename("\(small)/s\(folder)", "\(small)/r\(folder)") }
    if !awaitCondition({ recorder.count(.moved) >= folders || recorder.count(.rescanned) > 0 }) {
        print("  (gave up waiting for the renames)")
    }
    let rename = Double(MonotonicClock.now() - start) / 1e6 / Double(folders)

    start = MonotonicClock.now()
    for folder in 0..<folders {
        for file in 0..<10 { unlink("\(small)/r\(folder)/f\(file)") }
        rmdir("\(small)/r\(folder)")
    }
    if !awaitCondition({ recorder.deletedDirectories >= folders || recorder.count(.rescanned) > 0 }) {
        print("  (gave up waiting for the removals)")
    }
    let removal = Double(MonotonicClock.now() - start) / 1e6 / Double(folders)
    return (rename, removal, recorder.count(.overflow))
}

/// `rm -rf` (a child process) of a tree of `files` files in folders of 1000, watched
/// recursively: seconds until the watch has seen the tree go, and the overflows on the way.
func removeTree(files: Int, base: String) -> (seconds: Double, overflows: Int, deleted: Int) {
    let directory = makeStormDirectory(in: base)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    makeTree(in: directory, files: files)
    let monitor = FileChangeMonitor()
    let bus = Bus()
    FileSources.register(on: bus, monitor: monitor)
    let recorder = FolderRecorder()
    let sink = try! bus.files(at: directory, recursive: true).sink { recorder.record($0) }
    defer { sink.cancel() }
    _ = monitor.statistics

    let start = MonotonicClock.now()
    let remover = Process()
    remover.executableURL = URL(fileURLWithPath: "/bin/rm")
    remover.arguments = ["-rf", directory + "/tree"]
    do { try remover.run() } catch { fatalError("cannot run rm: \(error)") }
    remover.waitUntilExit()
    // Every folder (and the tree) reported deleted, by events or by a rescan.
    let folders = (files + 999) / 1000 + 1
    if !awaitCondition({ recorder.deletedDirectories >= folders }) {
        print("  (gave up waiting: \(recorder.deletedDirectories) of \(folders) folders seen deleted)")
    }
    return (Double(MonotonicClock.now() - start) / 1e9, recorder.count(.overflow), recorder.count(.deleted))
}

func filesScaleBenchmark(base: String, rounds: Int = 3) {
    let folders = 500
    print("files at scale: per-folder rename and removal (\(folders) folders of 10 files each), in \(base)")
    print("watched paths  round  rename ms/folder  removal ms/folder  overflows")
    var medians: [(Int, Double, Double)] = []
    for watched in [0, 50_000, 150_000] {
        var renames: [Double] = [], removals: [Double] = []
        for round in 1...rounds {
            let result = folderOperations(watched: watched, folders: folders, base: base)
            renames.append(result.rename)
            removals.append(result.removal)
            print(String(format: "%13d  %5d  %16.4f  %17.4f  %9d", watched, round, result.rename, result.removal, result.overflows))
        }
        medians.append((watched, renames.sorted()[rounds / 2], removals.sorted()[rounds / 2]))
    }
    for (watched, rename, removal) in medians {
        print(String(format: "median at %6d paths: rename %.4f ms (%.2fx the 0-path anchor), removal %.4f ms (%.2fx)",
                     watched, rename, rename / medians[0].1, removal, removal / medians[0].2))
    }
    print("Target: ≤ 0.1 ms per folder operation at 150k watched paths.")
    print()
    print("rm -rf of 100000 files in 100 folders, watched recursively")
    print("round  seconds  deleted reported  overflows")
    for round in 1...rounds {
        let result = removeTree(files: 100_000, base: base)
        print(String(format: "%5d  %7.3f  %16d  %9d", round, result.seconds, result.deleted, result.overflows))
    }
    print("Target: no overflow.")
}
