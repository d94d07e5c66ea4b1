import ControlProtocol
import EventBusHost
import Foundation
import Testing

/// Abuse that must hurt no one but the client doing it, against the real eventbusd as a child
/// process: clients that take every descriptor must not leave a crashed module's worker unable
/// to restart; one subscription must not name ~100 000 patterns (stalling the bus's delivery
/// loop, which matches each event against each) or journal units (a reader thread each). Every wait
/// is for a condition, bounded only to fail a broken test.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ControlAbuseTests {
    @Test func clientsLeaveTheDescriptorsACrashedWorkersRestartNeeds() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory, rest: """
            modules:
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
                isolation: process
            """)
        let path = try directory.write("eventbus.yaml", yaml)
        // Soft and hard 64: eventbusd cannot raise it; 100 clients would take every descriptor.
        let daemon = try DaemonProcessTests.Daemon(arguments: ["--config", path], openFiles: 64, in: directory)
        #expect(await daemon.waitFor("ready; SIGHUP reloads"), "\(daemon.output)")
        let worker = try #require(workerPID(socket))

        var held: [ControlConnection] = []
        var refusals: [String] = []
        for _ in 0..<100 {
            let connection = try ControlConnection(path: socket)
            connection.setReceiveTimeout(seconds: patienceSeconds)
            let first = try #require(try connection.readJSON())
            if first["type"] == "hello" {
                held.append(connection)
            } else {
                #expect(first["code"] == "too_many_clients")
                refusals.append(first["message"]?.stringValue ?? "")
            }
        }
        #expect(!held.isEmpty && !refusals.isEmpty, "greeted \(held.count), refused \(refusals.count)")
        #expect(refusals.allSatisfy { $0.contains("control.reserved_files") }, "\(refusals.first ?? "")")

        // With the clients still connected, the worker dies: its restart finds descriptors.
        kill(worker, SIGKILL)
        #expect(await daemon.waitFor("module worker crashed: killed by signal 9"), "\(daemon.output)")
        #expect(await daemon.waitFor("module restarted"), "\(daemon.output)")
        let log = daemon.output
        #expect(!log.contains("restart failed"), "\(log)")
        #expect(!log.contains("start limit reached"), "\(log)")

        held.removeAll()
        let restarted = await eventually {
            guard let pid = workerPID(socket) else { return false }
            return pid != worker
        }
        #expect(restarted, "\(daemon.output)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func oneSubscriptionIsRefusedPastItsPatternFileAndUnitLimits() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)

        let (connection, _) = try rawConnection(socket)
        let many = JSON.array((0...256).map { .string("abuse.p\($0).>") })
        try connection.send(["op": "subscribe", "patterns": many, "id": .int(1)])
        let refused = try #require(try connection.readJSON())
        #expect(refused["code"] == "bad_request", "\(refused)")
        #expect(refused["message"]?.stringValue?.contains("at most 256") == true, "\(refused)")
        try connection.send(["op": "subscribe", "journal": .array((0...256).map { .string("u\($0).service") }), "id": .int(2)])
        #expect(try connection.readJSON()?["message"]?.stringValue?.contains("at most 256") == true)
        try connection.send(["op": "subscribe", "files": .array((0...64).map { .string("/tmp/f\($0)") }), "id": .int(3)])
        #expect(try connection.readJSON()?["message"]?.stringValue?.contains("at most 64") == true)

        // Repeats count once; the connection carries on and may still subscribe.
        try connection.send(["op": "subscribe", "patterns": .array(Array(repeating: "abuse.>", count: 1000)), "id": .int(4)])
        let subscribed = try #require(try connection.readJSON())
        #expect(subscribed["type"] == "subscribed", "\(subscribed)")
        #expect(subscribed["patterns"] == ["abuse.>"])
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// A recursive watch on a large tree is bounded by `watch_entries`: the client is told, in its
    /// stream, and the watch stops; the rest of its subscription goes on.
    @Test func aClientsWatchOfATreePastWatchEntriesStopsAndSaysSo() async throws {
        let directory = try TemporaryDirectory()
        let tree = directory.path + "/tree"
        for folder in 0..<5 {
            try FileManager.default.createDirectory(atPath: "\(tree)/d\(folder)", withIntermediateDirectories: true)
            for file in 0..<5 { _ = try directory.write("tree/d\(folder)/f\(file)", "") }
        }
        let (yaml, socket) = controlConfig(directory, control: "  watch_entries: 20")
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)

        let (connection, _) = try rawConnection(socket)
        try connection.send(["op": "subscribe", "patterns": ["fs.>", "user.>"], "files": .string(tree), "recursive": .bool(true)])
        #expect(try connection.readJSON()?["type"] == "subscribed")
        let error = try #require(try connection.readJSON())
        #expect(error["name"] == "fs.error", "\(error)")
        #expect(error["source"]?.stringValue == "files:\(tree) recursive limit 20")
        #expect(error["fields"]?["message"]?.stringValue?.contains("holds more than 20 files and directories") == true, "\(error)")

        // The stream goes on: the client's other events still come.
        _ = try ask(socket, ["op": "post", "name": "user.after"])
        #expect(try connection.readJSON()?["name"] == "user.after")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func theJournalUnitsOfOneSubscriptionShareOneReader() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)

        let (connection, _) = try rawConnection(socket)
        let units = (0..<100).map { "abuse-\($0).service" }
        try connection.send(["op": "subscribe", "journal": .array(units.map { .string($0) })])
        #expect(try connection.readJSON()?["type"] == "subscribed")
        // A second client asking for the same units, in another order, joins that reader.
        let (other, _) = try rawConnection(socket)
        try other.send(["op": "subscribe", "journal": .array(units.reversed().map { .string($0) })])
        #expect(try other.readJSON()?["type"] == "subscribed")

        let journal = try #require(try ask(socket, ["op": "status"])["sources"]?.arrayValue)
            .filter { $0["id"]?.stringValue?.hasPrefix("journal:") == true }
        #expect(journal.count == 1, "\(journal.count) journal readers: \(journal.prefix(3))")
        #expect(journal.first?["subscriptions"]?.intValue == 2)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }
}

/// The worker pid of the first module, from `modules`.
private func workerPID(_ socket: String) -> Int32? {
    guard let modules = (try? ask(socket, ["op": "modules"]))?["modules"]?.arrayValue,
          let pid = modules.first?["pid"]?.intValue else { return nil }
    return Int32(pid)
}
