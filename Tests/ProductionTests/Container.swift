import Foundation
import Testing
import TestSupport

/// A throwaway Debian 12 booted under a real systemd: `systemd-nspawn -b` on the cached
/// ``ProductionRoot`` with `--volatile=overlay` (every write lands in a tmpfs of the container
/// and is gone when it stops), the package's folder bound read-only at ``packageMount``.
///
/// Never anything but `systemd-nspawn -D <our root>`: systemd booted outside a container root
/// would take over the machine's /tmp, /run and /etc.
///
/// Commands run inside with `nsenter -t <leader> -a` (the container's PID 1 is the leader), with
/// a clean environment and a `timeout`, so no command can hang a test. nspawn itself runs under
/// `timeout` too: a container outlives its test by at most `lifetime` even if the test process
/// dies before ``stop()``.
final class Container: @unchecked Sendable {
    static let packageMount = "/mnt/eventbus"

    let name: String
    /// `timeout`'s pid (nspawn is its child), and the container's PID 1 as the host sees it.
    let supervisor: Process
    let leader: Int32
    let bootSeconds: Double
    private let log: String
    private let scratch: TemporaryDirectory

    private init(name: String, supervisor: Process, leader: Int32, bootSeconds: Double, log: String, scratch: TemporaryDirectory) {
        self.name = name
        self.supervisor = supervisor
        self.leader = leader
        self.bootSeconds = bootSeconds
        self.log = log
        self.scratch = scratch
    }

    /// Boots a container of `root` and waits until its systemd reports the boot finished.
    static func boot(_ prepared: ProductionRoot, lifetime: Int = 1_800) async throws -> Container {
        guard prepared.root.hasPrefix(ProductionRoot.buildFolder + "/production-root/"),
              FileManager.default.fileExists(atPath: prepared.root + "/usr/lib/systemd/systemd") else {
            throw Failure("refusing to boot \(prepared.root): not a production root of ours")
        }
        let scratch = try TemporaryDirectory("eventbus-production")
        let name = "ebtest-" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let log = scratch.at("nspawn.log")
        guard FileManager.default.createFile(atPath: log, contents: nil) else { throw Failure("cannot create \(log)") }
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        process.arguments = ["--signal=TERM", "--kill-after=15", String(lifetime),
                             "/usr/bin/systemd-nspawn", "--boot", "--directory=\(prepared.root)", "--machine=\(name)",
                             "--register=no", "--keep-unit", "--volatile=overlay", "--console=passive",
                             "--bind-ro=\(prepared.packageDirectory):\(packageMount)"]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = output
        let start = ContinuousClock.now
        try process.run()
        try output.close()

        // The leader: nspawn's child whose command is systemd (nspawn forks twice; the
        // intermediate child exits).
        var leader: Int32 = 0
        let deadline = Date(timeIntervalSinceNow: 30)
        while leader == 0 {
            guard process.isRunning, Date() < deadline else {
                if process.isRunning { kill(process.processIdentifier, SIGTERM) }
                throw Failure("the container did not start: \(String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self))")
            }
            for nspawn in children(of: process.processIdentifier) {
                for child in children(of: nspawn) where command(of: child) == "systemd" { leader = child }
            }
            if leader == 0 { try await Task.sleep(for: .milliseconds(20)) }
        }
        let container = Container(name: name, supervisor: process, leader: leader, bootSeconds: 0, log: log, scratch: scratch)
        // Until systemd has its bus socket, systemctl fails at once ("Failed to connect to bus"):
        // ask again until it waits and answers.
        let booted = try await container.sh("""
            for i in $(seq 3600); do
              state=$(systemctl is-system-running --wait 2>&1)
              case "$state" in running|degraded) echo "$state"; exit 0 ;; esac
              sleep 0.05
            done
            echo "$state"; exit 1
            """, timeout: patienceSeconds)
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        guard booted.output.hasPrefix("running") || booted.output.hasPrefix("degraded") else {
            await container.stop()
            throw Failure("the container's systemd did not finish booting (\(booted.output)): \(container.nspawnLog)")
        }
        return Container(name: name, supervisor: process, leader: leader, bootSeconds: seconds, log: log, scratch: scratch)
    }

    /// Boots a container, installs the package in it (with the test drop-in, below), runs
    /// `body`, and stops the container whether `body` returns or throws.
    static func withInstalled<T>(_ dropIn: String = Container.testDropIn, _ body: (Container) async throws -> T) async throws -> T {
        try await withBooted { container in
            try await container.install(dropIn: dropIn)
            return try await body(container)
        }
    }

    /// Boots a container, runs `body`, and stops the container whether `body` returns or throws.
    static func withBooted<T>(_ body: (Container) async throws -> T) async throws -> T {
        let prepared = try await ProductionRoot.shared()
        let container = try await boot(prepared)
        print("container \(container.name) booted in \(String(format: "%.2f", container.bootSeconds)) s (PID 1 is \(container.leader) here)")
        do {
            let result = try await body(container)
            await container.stop()
            return result
        } catch {
            await container.stop()
            throw error
        }
    }

    /// Shorter waits than the shipped unit's, so watchdog and restart tests take seconds; and
    /// no start rate limit: the restart loops start it more often than systemd's default of 5
    /// starts in 10 s, after which it refuses to start and the socket unit fails with it.
    static let testDropIn = """
        [Unit]
        StartLimitIntervalSec=0
        [Service]
        WatchdogSec=3s
        RestartSec=200ms
        """

    /// `dpkg -i` of the package (its Depends are in the root already, no apt), the drop-in as
    /// `eventbusd.service.d/test.conf`, and the socket unit started (postinst only enables it).
    func install(dropIn: String) async throws {
        let result = try await sh("""
            set -e
            dpkg -i \(Self.packageMount)/eventbus.deb >/dev/null
            mkdir -p /etc/systemd/system/eventbusd.service.d
            cat > /etc/systemd/system/eventbusd.service.d/test.conf <<'DROPIN'
            \(dropIn)
            DROPIN
            systemctl daemon-reload
            systemctl start eventbusd.socket
            """)
        guard result.status == 0 else { throw Failure("installing the package failed: \(result.output)") }
    }

    /// `sh -c script` inside the container as root, with a clean environment, stopped by
    /// `timeout` after `timeout` seconds (status 124 then).
    @discardableResult
    func sh(_ script: String, timeout: Int = patienceSeconds) async throws -> ProcessResult {
        // Never the host: nsenter into a process that shares our mount namespace would run
        // `script` (systemctl, useradd, ...) on this machine.
        let ours = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/mnt")
        let theirs = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(leader)/ns/mnt")
        guard let ours, let theirs, ours != theirs else {
            throw Failure("pid \(leader) is not in a container's mount namespace (\(String(describing: theirs))); not running \(script)")
        }
        return try await run("/usr/bin/nsenter", ["--target", String(leader), "--all", "--root", "--wd",
                                           "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=/root",
                                           "/usr/bin/timeout", "--kill-after=5", String(timeout), "/bin/sh", "-c", script])
    }

    /// Writes `text` to `path` inside the container.
    func write(_ path: String, _ text: String) async throws {
        let result = try await sh("mkdir -p \"$(dirname \(path))\" && cat > \(path) <<'EVENTBUS_TEST_EOF'\n\(text)\nEVENTBUS_TEST_EOF")
        guard result.status == 0 else { throw Failure("writing \(path) failed: \(result.output)") }
    }

    /// The last lines of eventbusd's journal, for failure messages.
    func journal(lines: Int = 60, unit: String = "eventbusd") async -> String {
        let tail = (try? await sh("journalctl --no-pager -o short-monotonic -u \(unit) -n \(lines)"))?.output ?? "(journalctl failed)"
        return "\n--- journalctl -u \(unit) (last \(lines)) ---\n\(tail)"
    }

    /// A `systemctl show` property of eventbusd.service.
    func property(_ name: String, unit: String = "eventbusd") async throws -> String {
        try await sh("systemctl show -p \(name) --value \(unit)").output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    var nspawnLog: String { String(decoding: FileManager.default.contents(atPath: log) ?? Data(), as: UTF8.self) }

    /// Halts the container (SIGTERM to nspawn makes it halt the container's systemd), waits
    /// for nspawn to exit, and SIGKILLs the container's PID 1 (the whole container with it) if
    /// it does not within 20 s.
    func stop() async {
        let supervisor = supervisor
        let leader = leader
        _ = try? await blocking {
            for nspawn in Self.children(of: supervisor.processIdentifier) { kill(nspawn, SIGTERM) }
            let deadline = Date(timeIntervalSinceNow: 20)
            while supervisor.isRunning && Date() < deadline { usleep(20_000) }
            if supervisor.isRunning {
                kill(leader, SIGKILL)
                for nspawn in Self.children(of: supervisor.processIdentifier) { kill(nspawn, SIGKILL) }
                supervisor.waitUntilExit()
            }
        }
    }

    static func children(of pid: Int32) -> [Int32] {
        let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
        return text.split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    static func command(of pid: Int32) -> String {
        ((try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
