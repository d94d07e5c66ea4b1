import Foundation
import Testing
import TestSupport

extension Production {
    /// What the shipped units do under systemd today: readiness, the watchdog, socket
    /// activation, reload, stop, journald fields.
    @Suite struct ServiceBaseline {
        /// `systemctl start` returns once eventbusd sent READY=1, which it sends once its
        /// modules are up: the CLI answers at once and the hello module is already active.
        @Test(.timeLimit(.minutes(30)))
        func startReturnsOnceReady() async throws {
            try await Container.withInstalled { container in
                let result = try await container.sh("systemctl start eventbusd && eventbus status && eventbus modules")
                await check(result.status == 0, "start, then status and modules: \(result.output)", in: container)
                let hello = result.output.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("hello") } ?? ""
                await check(hello.contains("active"), "hello is active right after start returned: \(result.output)", in: container)
                #expect(try await container.property("ActiveState") == "active")
                await check(try await container.property("StatusText") != "", "eventbusd sends a STATUS= line", in: container)
            }
        }

        /// SIGSTOP freezes eventbusd's watchdog pings: systemd kills it (WatchdogSec=3s in the
        /// test drop-in) and restarts it (Restart=on-failure), and it runs with its config again.
        @Test(.timeLimit(.minutes(30)))
        func watchdogRestartsAFrozenHost() async throws {
            try await Container.withInstalled { container in
                try await succeed("systemctl start eventbusd", in: container)
                let pid = try await container.property("MainPID")
                let restarts = try await container.property("NRestarts")
                try await succeed("kill -STOP \(pid)", in: container)
                let waited = try await container.sh(waitForRestartScript(oldPID: pid, restarts: restarts))
                await check(waited.status == 0, "the watchdog restarts the frozen eventbusd (was pid \(pid), NRestarts \(restarts)): \(waited.output)", in: container)
                let journal = try await container.sh("journalctl -u eventbusd -o cat").output
                await check(journal.contains("Watchdog timeout"), "systemd says why it killed it", in: container)
                let modules = try await succeed("eventbus status && eventbus modules", in: container)
                await check(modules.output.contains("timer:every 60.0 seconds") && modules.output.contains("active"),
                            "after the restart it runs its config (the 60 s heartbeat timer, hello active): \(modules.output)", in: container)
            }
        }

        /// `eventbus status` in a loop while `systemctl restart` runs in a loop: the socket unit
        /// holds the listening socket, so no client fails.
        @Test(.timeLimit(.minutes(30)))
        func socketActivationKeepsClientsServedAcrossRestarts() async throws {
            // The unit's own 30 s watchdog, not the tests' 3 s: six restarts on a loaded machine
            // must not meet a watchdog kill, which would count as a failure restart.
            let dropIn = Container.testDropIn.replacingOccurrences(of: "WatchdogSec=3s\n", with: "")
            try await Container.withInstalled(dropIn) { container in
                try await succeed("systemctl start eventbusd", in: container)
                let result = try await container.sh("""
                    rm -f /tmp/restarts-done
                    ( for i in 1 2 3 4 5 6; do systemctl restart eventbusd; sleep 0.3; done; touch /tmp/restarts-done ) &
                    ok=0; failed=0
                    while [ ! -e /tmp/restarts-done ]; do
                      if out=$(eventbus status 2>&1); then ok=$((ok+1)); else failed=$((failed+1)); echo "FAILED: $out"; fi
                    done
                    wait
                    echo "ok=$ok failed=$failed"
                    """)
                let summary = result.output.split(separator: "\n").last.map(String.init) ?? ""
                await check(summary.hasPrefix("ok=") && summary.hasSuffix(" failed=0") && !summary.hasPrefix("ok=0 "),
                            "every status during 6 restarts answered: \(result.output)", in: container)
                #expect(try await container.property("NRestarts") == "0", "restarts by systemctl are not failures")
            }
        }

        /// `systemctl reload` after adding a timer: the timer appears in `eventbus status`.
        @Test(.timeLimit(.minutes(30)))
        func reloadAppliesTheNewConfig() async throws {
            try await Container.withInstalled { container in
                try await succeed("systemctl start eventbusd", in: container)
                let pid = try await container.property("MainPID")
                try await container.write("/etc/eventbus/eventbus.yaml", config(
                    sources: "  timers:\n    - name: heartbeat\n      every: 60s\n    - name: ebtest-reloaded\n      every: 1h"))
                // `eventbus status` names a timer by its interval: "timer:every 3600.0 seconds".
                try await succeed("systemctl reload eventbusd", in: container)
                let applied = try await poll {
                    try await container.sh("eventbus status").output.contains("every 3600")
                }
                await check(applied, "the timer added by the reload shows in status: \(try await container.sh("eventbus status").output)", in: container)
                #expect(try await container.property("MainPID") == pid, "a reload is not a restart")
            }
        }

        /// `systemctl stop`: eventbusd exits 0 and takes its module workers with it.
        @Test(.timeLimit(.minutes(30)))
        func stopIsClean() async throws {
            try await Container.withInstalled { container in
                try await succeed("systemctl start eventbusd && pgrep -f '^[^ ]*eventbus-module-worker '", in: container)
                try await succeed("systemctl stop eventbusd", in: container)
                let shown = try await container.sh("systemctl show -p Result -p ExecMainCode -p ExecMainStatus eventbusd").output
                await check(shown.contains("Result=success") && shown.contains("ExecMainStatus=0"), "a clean exit: \(shown)", in: container)
                let workers = try await container.sh("pgrep -af '^[^ ]*eventbus-module-worker '")
                await check(workers.status == 1, "no worker left after stop: \(workers.output)", in: container)
            }
        }

        /// A module's log line reaches journald with the field that names its module.
        @Test(.timeLimit(.minutes(30)))
        func moduleLogLinesCarryTheirModule() async throws {
            try await Container.withInstalled { container in
                try await succeed("systemctl start eventbusd && eventbus post user.fieldcheck", in: container)
                let found = try await poll {
                    try await container.sh("journalctl EVENTBUS_MODULE=hello -o cat").output.contains("hello, user.fieldcheck from")
                }
                await check(found, "hello's line in `journalctl EVENTBUS_MODULE=hello`: \(try await container.sh("journalctl -u eventbusd -o verbose -n 5").output)", in: container)
            }
        }
    }
}
