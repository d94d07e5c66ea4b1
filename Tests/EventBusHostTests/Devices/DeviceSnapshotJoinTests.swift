import ControlProtocol
import Foundation
import Testing

/// A control-socket client subscribed to every device and to `user.sentinel`: what a service
/// ordered `After=eventbusd.service` does when it starts. It connects to `socket` (a host that is
/// starting keeps it in its backlog until it answers) and subscribes at once.
private func deviceSubscriber(socket: String) -> SubscribedReader {
    SubscribedReader(socket: socket, request: ["op": "subscribe", "devices": ["*"], "patterns": ["user.sentinel"]],
                     until: { $0["name"]?.stringValue == "user.sentinel" })
}

/// A subscriber to devices gets exactly one snapshot, as its first events, whatever the moment it
/// joins the host's start (issue 46, item 9). Thirty starts of the real eventbusd — half with a
/// configured watch of every subsystem, whose source starts before the host is ready (the
/// joiners come while its first listing is made, posted or delivered, or after), half without
/// (the first joiner starts the source) — each joined by a control-socket subscriber that
/// connects before the host answers (it subscribes the moment it is accepted), by
/// `eventbus tail --devices` started as soon as the host says it is ready, and by a third once
/// both had a snapshot. Then `user.sentinel` is posted: it comes after anything the source could
/// still owe those subscribers (after the third one's snapshot), so what each shows before it is
/// all it will ever get of the start.
@Suite(.serialized, .tags(.realDaemon), .skippable(.realDaemon)) struct DeviceSnapshotJoinTests {
    /// What is wrong with a subscriber's events up to the sentinel: they must begin with
    /// `devices.status`, hold one `devices.snapshot`, and list as many devices before it as it says.
    private func problem(_ events: [JSON]) -> String? {
        let names = events.map { $0["name"]?.stringValue ?? "?" }
        guard let sentinel = names.firstIndex(of: "user.sentinel") else { return "no sentinel" }
        guard names.first == "devices.status" else { return "begins with \(names.prefix(3))" }
        let snapshots = names[..<sentinel].indices.filter { names[$0] == "devices.snapshot" }
        guard snapshots.count == 1, let snapshot = snapshots.first else { return "\(snapshots.count) snapshots" }
        let listed = events[..<snapshot].filter {
            $0["name"]?.stringValue == "device.added" && $0["fields"]?["origin"]?.stringValue == "snapshot"
        }.count
        let said = events[snapshot]["fields"]?["devices"]?.intValue ?? -1
        return Int64(listed) == said ? nil : "a snapshot of \(said) devices after \(listed) listed"
    }

    @Test(arguments: [true, false])
    func everyJoinerGetsExactlyOneSnapshotFirst(configuredWatch: Bool) async throws {
        var failures: [String] = []
        for start in 1...15 {
            let directory = try TemporaryDirectory()
            let socket = directory.path + "/control.sock"
            let config = try directory.write("eventbus.yaml", """
                control: {socket: \(socket)}
                \(configuredWatch ? "sources:\n  devices:\n    - {name: all}" : "")
                """)
            let daemon = try DaemonProcessTests.Daemon(arguments: ["--config", config], in: directory)
            #expect(await eventually { FileManager.default.fileExists(atPath: socket) }, "\(daemon.output)")
            let early = deviceSubscriber(socket: socket)
            #expect(await daemon.waitFor("ready; SIGHUP reloads"), "\(daemon.output)")
            let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--devices", "user.sentinel"], in: directory)
            func tailEvents() -> [JSON] { tail.stdout.split(separator: "\n").compactMap { try? JSON.parse(String($0)) } }
            func hasSnapshot(_ events: [JSON]) -> Bool { events.contains { $0["name"]?.stringValue == "devices.snapshot" } }
            #expect(await eventually { hasSnapshot(early.events) && hasSnapshot(tailEvents()) }, "\(tail.stdout.prefix(500))")
            let late = deviceSubscriber(socket: socket)
            #expect(await eventually { hasSnapshot(late.events) })
            _ = try ask(socket, ["op": "post", "name": "user.sentinel"])
            func sawSentinel(_ events: [JSON]) -> Bool { events.contains { $0["name"]?.stringValue == "user.sentinel" } }
            #expect(await eventually { sawSentinel(early.events) && sawSentinel(tailEvents()) && sawSentinel(late.events) })
            for (who, events, ended) in [("control-socket subscriber before ready", early.events, early.ended.value),
                                         ("tail --devices after ready", tailEvents(), tail.process.isRunning ? nil : tail.stderr),
                                         ("subscriber after both", late.events, late.ended.value)] {
                if let problem = problem(events) { failures.append("start \(start), \(who): \(problem)\(ended.map { " (reader ended: \($0))" } ?? "")") }
            }
            daemon.signal(SIGTERM)
            #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
        }
        #expect(failures.isEmpty, "\(failures.count) of 45 joins:\n\(failures.joined(separator: "\n"))")
    }
}
