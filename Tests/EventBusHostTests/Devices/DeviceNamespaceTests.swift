import ControlProtocol
import EventBusKit
import Foundation
import Testing

/// eventbusd's devices source end to end against the real kernel: the host runs inside a network
/// namespace (`ip netns exec`, which also mounts that namespace's sysfs), veth pairs come and go
/// in it, and `eventbus tail --subsystem net` follows them from outside through the control
/// socket. A net device's uevents reach only sockets of its own namespace, so this is also what
/// proves the monitor listens where the host runs. Two modules follow the same devices through
/// `context.bus.devices`, one in the host and one in a worker, sharing the config's monitor.
@Suite(.serialized, .tags(.realDaemon), .skippable(.realDaemon)) struct DeviceNamespaceTests {
    /// The device events of a `tail --json` output, by name.
    private func events(_ output: String) -> [JSON] {
        output.split(separator: "\n").compactMap { try? JSON.parse(String($0)) }.filter { $0["type"]?.stringValue == "event" }
    }

    private func changes(_ output: String, _ name: String, interface: String) -> [JSON] {
        events(output).filter { $0["name"]?.stringValue == name && $0["fields"]?["sysname"]?.stringValue == interface }
    }

    @Test(.enabled(if: NetworkLab.isPermitted, "skipped: cannot create network namespaces here (ip netns needs CAP_SYS_ADMIN)"))
    func vethPairsInTheHostsNamespaceAreAddedAndRemovedExactlyOnce() async throws {
        let directory = try TemporaryDirectory("devices-netns")
        let lab = NetworkLab()
        defer { lab.remove() }
        let namespace = try lab.namespace("dev")
        let tag = namespace.prefix(8)
        let (pre, preB) = ("\(tag)pa", "\(tag)pb")
        try NetworkLab.run([NetworkLab.ip, "-n", namespace, "link", "add", pre, "type", "veth", "peer", "name", preB])

        let socket = directory.path + "/control.sock"
        let config = try directory.write("eventbus.yaml", """
            control: {socket: \(socket)}
            sources:
              devices:
                - {name: nets, subsystem: net}
            modules:
              inhost:
                path: \(BuildProducts.fixture("FixtureDevices"))
                isolation: none
                config: {id: inhost}
              inworker:
                path: \(BuildProducts.fixture("FixtureDevices"))
                isolation: process
                config: {id: inworker}
            """)
        let daemon = try DaemonProcessTests.Daemon(arguments: ["--config", config], wrapper: lab.exec(namespace), in: directory)
        #expect(await daemon.waitFor("ready; SIGHUP reloads"), "\(daemon.output)")

        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--subsystem", "net"], in: directory)
        let everything = try CLIProcess(["tail", "--socket", socket, "--json", "--devices"], in: directory)
        #expect(await eventually { tail.stdout.contains(#""name":"devices.snapshot""#) }, "\(tail.stdout)")
        #expect(await eventually { everything.stdout.contains(#""name":"devices.snapshot""#) }, "\(everything.stdout)")
        let refused = try await eventbus(["tail", "--socket", socket, "--subsystem", "no such"], in: directory)
        #expect(refused.status != 0 && refused.stderr.contains("not a device subsystem name"), "\(refused.stderr)")
        // The snapshot is the namespace's: its loopback and the pair made before, nothing of the
        // machine's own interfaces.
        let snapshot = events(tail.stdout).filter { $0["name"]?.stringValue == "device.added" }
        let names = Set(snapshot.compactMap { $0["fields"]?["sysname"]?.stringValue })
        #expect(names == ["lo", pre, preB], "\(names)")
        #expect(snapshot.allSatisfy { $0["fields"]?["origin"]?.stringValue == "snapshot" && $0["fields"]?["from"]?.stringValue == "kernel" })

        let (a, b) = ("\(tag)xa", "\(tag)xb")
        try NetworkLab.run([NetworkLab.ip, "-n", namespace, "link", "add", a, "type", "veth", "peer", "name", b])
        try NetworkLab.run([NetworkLab.ip, "-n", namespace, "link", "del", a])
        try NetworkLab.run([NetworkLab.ip, "-n", namespace, "link", "del", pre])
        // A sentinel after them: once its removal is in, any repeat of theirs would be too.
        let (s, sB) = ("\(tag)sa", "\(tag)sb")
        try NetworkLab.run([NetworkLab.ip, "-n", namespace, "link", "add", s, "type", "veth", "peer", "name", sB])
        try NetworkLab.run([NetworkLab.ip, "-n", namespace, "link", "del", s])
        #expect(await eventually { !changes(tail.stdout, "device.removed", interface: sB).isEmpty }, "\(tail.stdout)")

        let output = tail.stdout
        for interface in [a, b] {
            let added = changes(output, "device.added", interface: interface)
            #expect(added.count == 1, "\(interface): \(added)")
            #expect(changes(output, "device.removed", interface: interface).count == 1, "\(interface)")
            let fields = try #require(added.first?["fields"])
            #expect(fields["origin"]?.stringValue == "event" && fields["action"]?.stringValue == "add")
            #expect(fields["subsystem"]?.stringValue == "net" && fields["ifindex"]?.intValue != nil)
            #expect(fields["prop.INTERFACE"]?.stringValue == interface && fields["seqnum"]?.intValue != nil)
        }
        for interface in [pre, preB] {
            #expect(changes(output, "device.added", interface: interface).count == 1, "\(interface): the snapshot's only")
            #expect(changes(output, "device.removed", interface: interface).count == 1, "\(interface)")
        }
        #expect(!output.contains(#""name":"devices.gap""#))
        // Every subsystem: the same interfaces, and the net devices' queues besides.
        #expect(await eventually { !changes(everything.stdout, "device.removed", interface: sB).isEmpty })
        #expect(changes(everything.stdout, "device.added", interface: a).count == 1)
        #expect(events(everything.stdout).contains { $0["fields"]?["subsystem"]?.stringValue == "queues" })

        // The modules saw the same: the snapshot first, then each change once.
        let posts = try CLIProcess(["tail", "--socket", socket, "--json", "--since", "1", "--no-follow", "result.devices.>"], in: directory)
        let seen = events(await posts.finish().stdout)
        for id in ["inhost", "inworker"] {
            let mine = seen.filter { $0["name"]?.stringValue == "result.devices.\(id)" }.compactMap { $0["fields"] }
            func count(_ event: String, _ interface: String, _ origin: String) -> Int {
                mine.filter { $0["event"]?.stringValue == event && $0["sysname"]?.stringValue == interface && $0["origin"]?.stringValue == origin }.count
            }
            #expect(mine.first?["event"]?.stringValue == "devices.status", "\(id): \(mine)")
            for interface in ["lo", pre, preB] { #expect(count("device.added", interface, "snapshot") == 1, "\(id) \(interface)") }
            for interface in [a, b] {
                #expect(count("device.added", interface, "event") == 1, "\(id) \(interface)")
                #expect(count("device.removed", interface, "event") == 1, "\(id) \(interface)")
            }
            #expect(count("device.removed", pre, "event") == 1, "\(id)")
        }
    }
}
