import ControlProtocol
import EventBusKit
import Foundation
import Testing

/// The devices source's udev layer against a real udevd: Debian's, unpacked by `.ci/setup`
/// (not installed: that would start udevd on the machine), run with eventbusd in a network,
/// mount and pid namespace of their own — a tmpfs on /run for its control socket and database,
/// and one rules file, systemd's 99-systemd.rules, which tags net devices `systemd`. Killing the
/// namespace's init (eventbusd) ends udevd with it.
@Suite(.serialized, .tags(.realDaemon), .skippable(.realDaemon)) struct DeviceUdevTests {
    /// udevadm, which is also udevd when invoked by that name.
    static let udevadm = ["/opt/eventbus-test/udev/bin/udevadm", "/bin/udevadm", "/usr/bin/udevadm"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }

    private static let systemdRules = "/lib/udev/rules.d/99-systemd.rules"

    private func events(_ output: String) -> [JSON] {
        output.split(separator: "\n").compactMap { try? JSON.parse(String($0)) }.filter { $0["type"]?.stringValue == "event" }
    }

    @Test(.enabled(if: NetworkLab.isPermitted && udevadm != nil && FileManager.default.fileExists(atPath: systemdRules),
                   "skipped: needs ip netns and udevd (bash .ci/setup unpacks it)"))
    func afterUdevsRulesDevicesCarryItsPropertiesAndTags() async throws {
        let udevadm = try #require(Self.udevadm)
        let directory = try TemporaryDirectory("devices-udev")
        let lab = NetworkLab()
        defer { lab.remove() }
        let namespace = try lab.namespace("udev")
        let rules = directory.path + "/rules"
        try FileManager.default.createDirectory(atPath: rules, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Self.systemdRules, toPath: rules + "/99-systemd.rules")
        // Runs as the namespace's init: udevd in the background, then eventbusd in its place.
        let script = """
            set -e
            mount -t tmpfs eventbus-udev /run
            mkdir -p /run/udev
            mount --bind \(rules) /lib/udev/rules.d
            (exec -a systemd-udevd \(udevadm) > \(directory.path)/udevd.log 2>&1) &
            for i in $(seq 1 3000); do [ -S /run/udev/control ] && break; sleep 0.01; done
            exec "$@"
            """
        let wrapper = lab.exec(namespace) + ["/usr/bin/unshare", "--mount", "--propagation", "private", "--pid", "--fork",
                                             "--kill-child", "--mount-proc", "/bin/bash", "-c", script, "bash"]
        let socket = directory.path + "/control.sock"
        let config = try directory.write("eventbus.yaml", """
            control: {socket: \(socket)}
            sources:
              devices:
                - {name: tagged, tag: systemd, layer: udev}
            """)
        let daemon = try DaemonProcessTests.Daemon(arguments: ["--config", config], wrapper: wrapper, in: directory)
        #expect(await daemon.waitFor("ready; SIGHUP reloads"), "\(daemon.output)")

        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--subsystem", "net"], in: directory)
        #expect(await eventually { tail.stdout.contains(#""name":"devices.snapshot""#) }, "\(tail.stdout)")
        let status = try #require(events(tail.stdout).first { $0["name"]?.stringValue == "devices.status" })
        #expect(status["fields"]?["from"]?.stringValue == "udev", "automatic picks udev where it runs: \(status)")

        let tag = namespace.prefix(8)
        let (a, b) = ("\(tag)ua", "\(tag)ub")
        try NetworkLab.run([NetworkLab.ip, "-n", namespace, "link", "add", a, "type", "veth", "peer", "name", b])
        try NetworkLab.run([NetworkLab.ip, "-n", namespace, "link", "del", a])
        let (s, sB) = ("\(tag)sa", "\(tag)sb")
        try NetworkLab.run([NetworkLab.ip, "-n", namespace, "link", "add", s, "type", "veth", "peer", "name", sB])
        try NetworkLab.run([NetworkLab.ip, "-n", namespace, "link", "del", s])
        func changes(_ output: String, _ name: String, _ interface: String) -> [JSON] {
            events(output).filter { $0["name"]?.stringValue == name && $0["fields"]?["sysname"]?.stringValue == interface }
        }
        #expect(await eventually { !changes(tail.stdout, "device.removed", sB).isEmpty },
                "\(tail.stdout)\nudevd: \((try? String(contentsOfFile: directory.path + "/udevd.log", encoding: .utf8)) ?? "")")

        let output = tail.stdout
        for interface in [a, b] {
            let added = changes(output, "device.added", interface)
            #expect(added.count == 1, "\(interface): \(added)")
            #expect(changes(output, "device.removed", interface).count == 1, "\(interface)")
            let fields = try #require(added.first?["fields"])
            #expect(fields["from"]?.stringValue == "udev")
            // What only udev adds: its rules' properties and tags, and when it initialized the device.
            #expect(fields["prop.SYSTEMD_ALIAS"]?.stringValue == "/sys/subsystem/net/devices/\(interface)", "\(fields)")
            #expect(fields["prop.TAGS"]?.stringValue?.contains(":systemd:") == true, "\(fields)")
            #expect(fields["prop.USEC_INITIALIZED"] != nil)
        }

        // The config's tagged watch (its events are in the host's replay ring): tagged devices only.
        let replay = try CLIProcess(["tail", "--socket", socket, "--json", "--since", "1", "--no-follow", "device.*"], in: directory)
        let tagged = events(await replay.finish().stdout).filter { $0["source"]?.stringValue?.contains("tag=systemd") == true }
        #expect(tagged.contains { $0["name"]?.stringValue == "device.added" && $0["fields"]?["sysname"]?.stringValue == a })
        #expect(tagged.allSatisfy { $0["fields"]?["prop.TAGS"]?.stringValue?.contains(":systemd:") == true }, "\(tagged)")
        #expect(!tagged.contains { $0["fields"]?["sysname"]?.stringValue == "lo" })
    }
}
