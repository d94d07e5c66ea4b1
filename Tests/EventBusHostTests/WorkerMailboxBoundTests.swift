import ControlProtocol
import Foundation
import Testing

/// A module in a worker process is bounded as one inside eventbusd: `mailbox_capacity` and
/// `mailbox_bytes` bound everything it holds, wherever it waits — the host's mailbox, the frames
/// on their way, the worker's queue. Past them its events are dropped, counted and announced
/// (gap notices, `eventbus modules`, the stall warning), and at a shutdown what it held is
/// counted as lost once, exactly. Real eventbusd, real workers, the stalled fixture held until
/// the test creates its release file.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct WorkerMailboxBoundTests {
    typealias Daemon = DaemonProcessTests.Daemon

    /// eventbusd with one module, `stalled`, in a worker: it blocks on its first `test.>`
    /// event until `release` exists. `entry` adds lines to its section.
    func daemon(_ directory: TemporaryDirectory, release: String, entry: String, top: String = "") async throws -> Daemon {
        try await Daemon.running("""
            \(top)
            control: {socket: \(socket(directory))}
            modules:
              stalled:
                path: \(BuildProducts.fixture("FixtureStalled"))
                isolation: process
                config: {release_file: \(release)}
                worker: {heartbeat_timeout: 1h}
            \(entry.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n"))
            """, in: directory)
    }

    func socket(_ directory: TemporaryDirectory) -> String { directory.path + "/control.sock" }

    /// The host's `modules` answer for the stalled module.
    func stalled(_ directory: TemporaryDirectory) -> JSON? {
        (try? ask(socket(directory), ["op": "modules"]))?["modules"]?.arrayValue?.first { $0["name"]?.stringValue == "stalled" }
    }

    func count(_ module: JSON?, _ key: String) -> Int64 { module?[key]?.intValue ?? -1 }

    /// Posts `count` events named `name`, each with a string field of `payload` bytes, on one
    /// connection, a window of them at a time.
    func post(_ directory: TemporaryDirectory, name: String, count: Int, payload: Int) throws {
        let (connection, _) = try rawConnection(socket(directory))
        let text = JSON.string(String(repeating: "x", count: payload))
        var sent = 0
        while sent < count {
            let window = min(200, count - sent)
            var bytes: [UInt8] = []
            for index in sent..<(sent + window) {
                bytes += JSONWriter.line(["op": "post", "name": .string(name), "fields": ["n": .int(Int64(index)), "p": text]])
            }
            try connection.send(bytes)
            for _ in 0..<window {
                guard try connection.readJSON()?["type"]?.stringValue == "posted" else { throw POSIXError(.EPROTO) }
            }
            sent += window
        }
    }

    /// The module's report (`result.stalled`) after `test.report`, seen through a real tail.
    func report(_ directory: TemporaryDirectory) async throws -> JSON {
        let tail = try CLIProcess(["tail", "result.>", "--json", "--count", "1", "--socket", socket(directory)], in: directory)
        #expect(await waitForTailing(socket(directory), count: 1))
        _ = try ask(socket(directory), ["op": "post", "name": "test.report"])
        let event = try #require(await tail.finish().jsonLines.first { $0["type"]?.stringValue == "event" })
        return try #require(event["fields"])
    }

    @Test func aStalledModuleInAWorkerHoldsAtMostItsCapacityAndItsDropsAreCountedAndAnnounced() async throws {
        let directory = try TemporaryDirectory()
        let release = directory.path + "/release"
        let daemon = try await daemon(directory, release: release, entry: "mailbox_capacity: 1000")
        _ = try ask(socket(directory), ["op": "post", "name": "test.first"])  // the module blocks on it
        try postMany(socket(directory), name: "test.item", count: 20_000)
        let posted: Int64 = 20_001

        // Every post has reached the module's mailbox: held for it, or dropped.
        #expect(await eventually { count(stalled(directory), "queued") + count(stalled(directory), "dropped") == posted },
                "\(String(describing: stalled(directory)))")
        let held = try #require(stalled(directory))
        // The event it is stuck on counts until the worker says it was handled: so exactly the
        // capacity is held, wherever it waits, and the rest is dropped.
        #expect(count(held, "queued") == 1000, "\(held)")
        #expect(count(held, "dropped") == posted - 1000, "\(held)")
        #expect(count(held, "delivered") == 0, "\(held)")
        #expect(await daemon.waitFor("module stalled is stalled: its mailbox is full (1000 queued"), "\(daemon.output)")

        // Released, it handles what it held, and is told of the rest by one gap notice.
        #expect(FileManager.default.createFile(atPath: release, contents: nil))
        #expect(await eventually { count(stalled(directory), "queued") == 0 }, "\(String(describing: stalled(directory)))")
        let report = try await report(directory)
        let handled = try #require(report["count"]?.intValue)
        #expect(handled == 1000, "\(report)")
        #expect(report["gaps"]?.intValue == 1, "\(report)")
        #expect(report["dropped"]?.intValue == posted - 1000, "\(report)")
        #expect(handled + (report["dropped"]?.intValue ?? 0) == posted, "\(report)")
        let after = try #require(stalled(directory))
        #expect(count(after, "delivered") + count(after, "dropped") == posted + 1, "the report too: \(after)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// A count alone would let a stalled worker pin its capacity of large events; what it holds
    /// is bounded by `mailbox_bytes` too — in the worker and on the way there as well.
    @Test func aStalledModuleInAWorkerHoldsAtMostItsMailboxBytes() async throws {
        let directory = try TemporaryDirectory()
        let release = directory.path + "/release"
        let daemon = try await daemon(directory, release: release, entry: "mailbox_bytes: 1MiB")
        _ = try ask(socket(directory), ["op": "post", "name": "test.first"])  // the module blocks on it
        try post(directory, name: "test.large", count: 100, payload: 200_000)

        #expect(await eventually { count(stalled(directory), "queued") + count(stalled(directory), "dropped") == 101 },
                "\(String(describing: stalled(directory)))")
        let held = try #require(stalled(directory))
        // The first (small) and five of 200 kB fit in 1 MiB; 95 are dropped.
        #expect(count(held, "queued") == 6, "\(held)")
        #expect(count(held, "queued_bytes") > 1_000_000 && count(held, "queued_bytes") <= 1 << 20, "\(held)")
        #expect(count(held, "dropped") == 95, "\(held)")

        #expect(FileManager.default.createFile(atPath: release, contents: nil))
        #expect(await eventually { count(stalled(directory), "queued") == 0 }, "\(String(describing: stalled(directory)))")
        let report = try await report(directory)
        #expect(report["count"]?.intValue == 6, "\(report)")
        #expect(report["gaps"]?.intValue == 1, "\(report)")
        #expect(report["dropped"]?.intValue == 95, "\(report)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// A shutdown that a stalled worker outlasts counts what the module held as lost — once,
    /// exactly: the host's mailbox, the frames on their way and the worker's queue together.
    /// (Events of 4 kB, so that the host's channel and mailbox hold some too when the worker is
    /// not bounded.)
    @Test func aShutdownCountsWhatAStalledWorkerHeldAsLostOnceAndExactly() async throws {
        let directory = try TemporaryDirectory()
        let release = directory.path + "/release"
        let daemon = try await daemon(directory, release: release, entry: "mailbox_capacity: 2000",
                                      top: "shutdown_timeout: 3s")
        _ = try ask(socket(directory), ["op": "post", "name": "test.first"])  // the module blocks on it
        try post(directory, name: "test.item", count: 10_000, payload: 4_000)
        #expect(await eventually { count(stalled(directory), "queued") + count(stalled(directory), "dropped") == 10_001 },
                "\(String(describing: stalled(directory)))")
        let held = count(stalled(directory), "queued")
        #expect(held == 2000)

        daemon.signal(SIGTERM)
        _ = await daemon.exitStatus()
        // Every number the log gives as lost for this module, from the shutdown's lines.
        let lost = daemon.output.split(separator: "\n")
            .filter { $0.contains("module=stalled") || $0.contains("module stalled") }
            .filter { $0.contains("lost") }
        let numbers = lost.compactMap { line -> Int64? in
            guard let range = line.range(of: #"(\d+) (queued )?event\(s\)[^;]* (are )?lost"#, options: .regularExpression) else { return nil }
            return Int64(line[range].prefix { $0.isNumber })
        }
        #expect(numbers == [held], "\(lost)")
    }
}
