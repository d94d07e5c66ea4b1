import ControlProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// The `dbus` kind through the real eventbusd and CLI, on a private real `dbus-daemon`: a watch
/// of the config, `eventbus tail --dbus` and a rule's `from: {dbus: …}` each get the signals
/// `busctl emit` sends, once and in order; `status` shows the sources; a bad match is refused
/// with the file, line and key, or with the tail's value named.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct DBusDaemonTests {
    /// `dbus-daemon --session` at `unix:path=<folder>/bus`, stopped by its pid.
    final class PrivateBus {
        let process = Process()
        let address: String

        init(in directory: TemporaryDirectory) throws {
            address = "unix:path=\(directory.path)/bus"
            process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
            process.arguments = ["--session", "--nofork", "--address=\(address)", "--print-address"]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            // It prints its address once it listens.
            guard !output.fileHandleForReading.readData(ofLength: 1).isEmpty else { throw POSIXError(.ECONNREFUSED) }
        }

        func emit(_ arguments: [String]) throws {
            let busctl = Process()
            busctl.executableURL = URL(fileURLWithPath: "/usr/bin/busctl")
            busctl.arguments = ["--address=\(address)", "emit"] + arguments
            try busctl.run()
            busctl.waitUntilExit()
            guard busctl.terminationStatus == 0 else { throw POSIXError(.EIO) }
        }

        deinit {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    @Test func aConfigWatchATailAndARuleEachGetEverySignalOnceInOrder() async throws {
        let directory = try TemporaryDirectory()
        let bus = try PrivateBus(in: directory)
        let socket = directory.path + "/control.sock"
        let marks = directory.path + "/marks"
        let daemon = try await DaemonProcessTests.Daemon.running("""
            control: {socket: \(socket)}
            sources:
              dbus:
                - name: probe
                  bus: "\(bus.address)"
                  match: { interface: org.eventbus.Probe, member: Numbered }
            rules:
              - name: mark
                on: dbus.signal
                from: { dbus: "bus=\(bus.address),interface=org.eventbus.Probe,member=Numbered,arg1=mark" }
                run: ["/bin/sh", "-c", "echo {{arg0}} >> \(marks)"]
                mode: queued

            """, in: directory)
        let config = try CLIProcess(["tail", "--socket", socket, "--json", "dbus.signal", "interface=org.eventbus.Probe"], in: directory)
        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--dbus", "bus=\(bus.address),interface=org.eventbus.Probe"], in: directory)
        #expect(await waitForTailing(socket, count: 2))
        let status = try await eventbus(["status", "--socket", socket], in: directory)
        #expect(status.stdout.contains(Self.configSource(bus)), "\(status.stdout)")
        #expect(status.stdout.contains("following bus at"), "\(status.stdout)")

        for number in 0..<50 {
            try bus.emit(["/org/eventbus/probe", "org.eventbus.Probe", "Numbered", "us", "\(number)", number % 10 == 0 ? "mark" : "plain"])
        }
        // Each source posts its own events on the bus: the config's, the tail's and the rule's.
        let sources = [(config, Self.configSource(bus)), (tail, "dbus:bus=address:\(bus.address) match=interface=org.eventbus.Probe")]
        for (process, source) in sources {
            #expect(await eventually { Self.numbers(process.stdout, from: source).count >= 50 }, "\(source): \(process.stdout.suffix(500))")
            #expect(Self.numbers(process.stdout, from: source) == Array(0..<50), "\(source): each signal once, in order")
        }
        #expect(await eventually { ((try? String(contentsOfFile: marks, encoding: .utf8)) ?? "").split(separator: "\n").count >= 5 })
        #expect((try? String(contentsOfFile: marks, encoding: .utf8))?.split(separator: "\n") == ["0", "10", "20", "30", "40"])

        for process in [config, tail] {
            kill(process.process.processIdentifier, SIGTERM)
            _ = await process.finish()
        }
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func badMatchesAreRefusedNamingWhere() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("eventbus.yaml", """
            sources:
              dbus:
                - name: wrong
                  match: { interface: org.eventbus.Probe, colour: red }
            """)
        let check = try DaemonProcessTests.Daemon(arguments: ["--check-config", "--config", config], in: directory)
        #expect(await check.exitStatus() != 0)
        #expect(check.output.contains("\(config):4: sources.dbus[0].match: unknown key \"colour\""), "\(check.output)")

        let socket = directory.path + "/control.sock"
        let daemon = try await DaemonProcessTests.Daemon.running("control: {socket: \(socket)}\n", in: directory)
        let tail = try await eventbus(["tail", "--socket", socket, "--dbus", "interface=org.eventbus.Probe,colour=red"], in: directory)
        #expect(tail.status != 0)
        #expect(tail.stderr.contains("dbus \"interface=org.eventbus.Probe,colour=red\""), "\(tail.stderr)")
        #expect(tail.stderr.contains("unknown key \"colour\""), "\(tail.stderr)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    static func configSource(_ bus: PrivateBus) -> String {
        "dbus:bus=address:\(bus.address) match=interface=org.eventbus.Probe,member=Numbered"
    }

    /// The `arg0` of each `dbus.signal` line from `source` of a `tail --json` output, in order.
    static func numbers(_ output: String, from source: String) -> [Int] {
        output.split(separator: "\n").compactMap { line in
            guard let event = try? JSON.parse(String(line)), event["name"]?.stringValue == "dbus.signal",
                  event["source"]?.stringValue == source else { return nil }
            return event["fields"]?["arg0"]?.intValue.map(Int.init)
        }
    }
}
