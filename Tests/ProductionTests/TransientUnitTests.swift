import Foundation
import Testing
import TestSupport

extension Production {
    /// Rules' commands as transient units (docs/transient-units.md) under the container's real
    /// systemd: `transient-unit-probe` (Tests/Fixtures/TransientUnitProbe) runs one command
    /// through `TransientUnitLauncher` and prints what it saw as JSON lines; the test installs it
    /// next to the packaged eventbusd (whose Swift runtime it uses) and checks each outcome
    /// against what systemctl and journalctl say.
    @Suite struct TransientUnits {
        static let probe = "/usr/lib/eventbus/transient-unit-probe"

        /// As root (systemd's private socket): the unit is listed while it runs, as its `user:`,
        /// with the rule's properties; a second unit of the same name is refused; runs survive
        /// `systemctl daemon-reload` and `daemon-reexec`; cancelling the run stops it (`StopUnit`)
        /// and it is gone.
        @Test(.timeLimit(.minutes(30)))
        func aUnitRunsAsItsUserWithItsPropertiesUntilCancelled() async throws {
            try await Container.withInstalled { container in
                try await installProbe(in: container)
                let unit = "eventbus-rule-probe-1.service"
                // In a unit of its own (as UnitsTests does): a process left behind by the
                // command's shell would keep the harness's output pipe open.
                try await succeed("""
                    systemd-run -q --unit=ebprobe-1 sh -c "exec env LD_LIBRARY_PATH=/usr/lib/eventbus \(Self.probe) --unit \(unit) --user nobody \
                      --cancel-when /tmp/cancel-1 --property MemoryMax=64M --property ProtectSystem=strict --property PrivateTmp=yes \
                      --property Nice=5 -- /bin/sh -c 'echo \\"running as \\$(id -un)\\"; exec sleep 300' > /tmp/probe-1.jsonl 2>&1"
                    """, in: container)
                let listed = try await poll {
                    try await container.sh("systemctl list-units --all --plain --no-legend '\(unit)'").output.contains("running")
                }
                await check(listed, "\(unit) is listed running: \(try await container.sh("systemctl list-units --all 'eventbus-rule-*'; cat /tmp/probe-1.jsonl").output)", in: container)
                let shown = try await container.sh("systemctl show -p User -p MemoryMax -p ProtectSystem -p PrivateTmp -p Nice -p Type -p CollectMode \(unit)").output
                for expected in ["User=nobody", "MemoryMax=67108864", "ProtectSystem=strict", "PrivateTmp=yes", "Nice=5", "Type=exec",
                                 "CollectMode=inactive-or-failed"] {
                    await check(shown.contains(expected), "\(unit) has \(expected): \(shown)", in: container)
                }
                let started = try await lines("/tmp/probe-1.jsonl", in: container).first { $0["event"] as? String == "started" }
                let pid = started?["pid"] as? Int ?? 0
                await check(pid > 0 && started?["unit"] as? String == unit, "started names the unit and its pid: \(String(describing: started))", in: container)
                let again = try await run("--unit \(unit) -- /bin/true", in: container)
                await check(again?["termination"] as? String == "failedToStart" && (again?["reason"] as? String ?? "").contains("already"),
                            "a second unit of the same name is refused, in systemd's words: \(String(describing: again))", in: container)
                let owner = try await container.sh("ps -o user= -p \(pid)").output.trimmingCharacters(in: .whitespacesAndNewlines)
                await check(owner == "nobody", "the main process (\(pid)) runs as nobody, not \(owner)", in: container)
                let wrote = try await poll {
                    try await container.sh("journalctl -u \(unit) -o cat").output.contains("running as nobody")
                }
                await check(wrote, "its output is in the journal under the unit", in: container)

                // systemd reloaded (it removes every unit from the bus and puts it back) and
                // re-executed (as a systemd upgrade does; the private socket closes) under two
                // running units: each run reads its unit back and follows it to its end.
                try await succeed("""
                    systemd-run -q --unit=ebprobe-13 sh -c "exec \(Self.probe) --unit eventbus-rule-probe-13.service \
                      -- /bin/sh -c 'sleep 5; exit 3' > /tmp/probe-13.jsonl 2>&1"
                    """, in: container)
                let running = try await poll {
                    try await lines("/tmp/probe-13.jsonl", in: container).contains { $0["event"] as? String == "started" }
                }
                await check(running, "the second unit started: \(try await container.sh("cat /tmp/probe-13.jsonl").output)", in: container)
                try await succeed("systemctl daemon-reload && systemctl daemon-reexec", in: container)
                let afterReexec = try await outcome("/tmp/probe-13.jsonl", in: container)
                await check(afterReexec?["termination"] as? String == "exited" && afterReexec?["status"] as? Int == 3,
                            "its exit is seen across the re-execution: \(String(describing: afterReexec))", in: container)
                await check(try await lines("/tmp/probe-1.jsonl", in: container).allSatisfy { $0["event"] as? String != "outcome" },
                            "the first run still waits for its unit: \(try await container.sh("cat /tmp/probe-1.jsonl").output)", in: container)

                try await succeed("touch /tmp/cancel-1", in: container)
                let outcome = try await outcome("/tmp/probe-1.jsonl", in: container)
                await check(outcome?["termination"] as? String == "stopped", "cancelling stops the unit: \(String(describing: outcome))", in: container)
                await check((outcome?["tail"] as? [String])?.contains("running as nobody") == true,
                            "the tail has what it wrote: \(String(describing: outcome))", in: container)
                let gone = try await poll {
                    try await container.sh("systemctl list-units --all --plain --no-legend '\(unit)'").output
                        .trimmingCharacters(in: .whitespacesAndNewlines).isEmpty
                }
                await check(gone, "\(unit) is gone: \(try await container.sh("systemctl status \(unit)").output)", in: container)
                let stopped = try await container.sh("journalctl -o cat UNIT=\(unit)").output
                await check(stopped.contains("Stopped") || stopped.contains("Deactivated"), "systemd stopped it: \(stopped)", in: container)
            }
        }

        /// As root, one command at a time: an exit status with the output tail and the event on
        /// standard input; a signal; a timeout that kills; the default user; and starts that fail
        /// — unknown user, missing program, a property systemd cannot take — each with its reason.
        @Test(.timeLimit(.minutes(30)))
        func eachOutcomeAsSystemdReportsIt() async throws {
            try await Container.withInstalled { container in
                try await installProbe(in: container)
                let exited = try await run("--unit eventbus-rule-probe-2.service --user nobody --tail 3 --stdin '{\"name\":\"user.x\"}' -- /bin/sh -c 'echo one; echo two; cat; echo; id -un; exit 3'", in: container)
                await check(exited?["termination"] as? String == "exited" && exited?["status"] as? Int == 3,
                            "exit 3: \(String(describing: exited))", in: container)
                let tail = exited?["tail"] as? [String] ?? []
                await check(tail.count <= 3 && tail.last == "nobody" && tail.contains(#"{"name":"user.x"}"#),
                            "the last 3 lines, the event read from standard input among them: \(tail)", in: container)

                let signalled = try await run("--unit eventbus-rule-probe-3.service -- /bin/sh -c 'kill -9 $$'", in: container)
                await check(signalled?["termination"] as? String == "signalled" && signalled?["status"] as? Int == 9,
                            "killed by SIGKILL: \(String(describing: signalled))", in: container)

                // Exits before systemd saw its execve succeed: the start job fails, the status is the command's.
                let quick = try await run("--unit eventbus-rule-probe-3b.service -- /bin/false", in: container)
                await check(quick?["termination"] as? String == "exited" && quick?["status"] as? Int == 1,
                            "an instant exit 1 is an exit, not a failed start: \(String(describing: quick))", in: container)

                let timedOut = try await run("--unit eventbus-rule-probe-4.service --timeout 1 -- /bin/sleep 300", in: container)
                await check(timedOut?["termination"] as? String == "timedOut", "RuntimeMaxSec=1s stops it: \(String(describing: timedOut))", in: container)
                let afterTimeout = try await container.sh("pgrep -x 'sleep' -a || true").output
                await check(!afterTimeout.contains("sleep 300"), "nothing of it is left: \(afterTimeout)", in: container)

                // Arguments reach the program as written: systemd's own `$VARIABLE` expansion is escaped.
                let dollars = try await run("--unit eventbus-rule-probe-4b.service --tail 1 -- /bin/echo '$HOME costs $5, ${PATH} $$'", in: container)
                await check(dollars?["tail"] as? [String] == ["$HOME costs $5, ${PATH} $$"], "no expansion: \(String(describing: dollars))", in: container)

                let defaultUser = try await run("--unit eventbus-rule-probe-5.service --tail 1 -- /usr/bin/id -un", in: container)
                await check(defaultUser?["termination"] as? String == "exited" && defaultUser?["tail"] as? [String] == ["nobody"],
                            "no user: nobody, not root: \(String(describing: defaultUser))", in: container)

                let dynamic = try await run("--unit eventbus-rule-probe-14.service --property DynamicUser=yes --tail 1 -- /usr/bin/id -un", in: container)
                let dynamicUser = (dynamic?["tail"] as? [String])?.first ?? ""
                await check(dynamic?["termination"] as? String == "exited" && !dynamicUser.isEmpty && dynamicUser != "nobody" && dynamicUser != "root",
                            "DynamicUser=yes: a user of the run's own: \(String(describing: dynamic))", in: container)

                let noUser = try await run("--unit eventbus-rule-probe-6.service --user no-such-user -- /bin/true", in: container)
                let noUserReason = noUser?["reason"] as? String ?? ""
                await check(noUser?["termination"] as? String == "failedToStart" && noUserReason.contains("217/USER"),
                            "an unknown user: \(String(describing: noUser))", in: container)

                let noProgram = try await run("--unit eventbus-rule-probe-7.service -- /usr/bin/no-such-program", in: container)
                await check(noProgram?["termination"] as? String == "failedToStart" && (noProgram?["reason"] as? String ?? "").contains("203/EXEC"),
                            "a missing program: \(String(describing: noProgram))", in: container)

                let badProperty = try await run("--unit eventbus-rule-probe-8.service --property MemoryMax=banana -- /bin/true", in: container)
                await check(badProperty?["termination"] as? String == "failedToStart"
                            && (badProperty?["reason"] as? String ?? "").hasPrefix("MemoryMax: 'banana'"),
                            "a bad property never reaches systemd: \(String(describing: badProperty))", in: container)

                // Cancelled at once — before the start, or while systemd answers it: stopped, nothing left.
                try await succeed("touch /tmp/cancel-now", in: container)
                let early = try await run("--unit eventbus-rule-probe-12.service --cancel-when /tmp/cancel-now -- /bin/sleep 300", in: container)
                await check(early?["termination"] as? String == "stopped", "cancelled at once: \(String(describing: early))", in: container)

                let left = try await container.sh("systemctl list-units --all --plain --no-legend 'eventbus-rule-probe-*'").output
                await check(left.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "every unit is gone: \(left)", in: container)
            }
        }

        /// As the packaged service's user `eventbus`, through the system bus, with polkit as
        /// Debian ships it and no grant: the launcher says up front that systemd would refuse it.
        @Test(.timeLimit(.minutes(30)))
        func theServiceUserIsToldUpFrontThatSystemdWouldRefuseIt() async throws {
            try await Container.withInstalled { container in
                try await installProbe(in: container)
                let refused = try await run("--unit eventbus-rule-probe-9.service -- /bin/true", as: "eventbus", in: container)
                await check(refused?["event"] as? String == "unavailable" && refused?["code"] as? String == "notAllowed"
                            && (refused?["message"] as? String ?? "").contains("polkit does not allow it org.freedesktop.systemd1.manage-units"),
                            "connect says no, and why: \(String(describing: refused))", in: container)
                print("as eventbus, without a grant: \(refused?["message"] as? String ?? "?")")
                // The shipped unit is what it was: no grant, no capability (docs/rules-privileges.md).
                let exposure = try await container.sh("systemd-analyze security eventbusd.service --no-pager | grep 'Overall exposure'").output
                print("eventbusd.service: \(exposure.trimmingCharacters(in: .whitespacesAndNewlines))")
            }
        }

        /// Why the package grants nothing through polkit (docs/rules-privileges.md): systemd 252
        /// tells polkit no unit for `StartTransientUnit`, so a grant scoped to `eventbus-rule-*`
        /// refuses every start, and the only grant that lets `eventbus` start one — any call
        /// without a unit — lets it start any unit, as root.
        @Test(.timeLimit(.minutes(30)))
        func aPolkitGrantCannotBeScopedToTheRulesUnits() async throws {
            try await Container.withInstalled { container in
                try await installProbe(in: container)
                try await grant(in: container, when: "unit !== undefined && unit.indexOf(\"eventbus-rule-\") == 0")
                let scoped = try await run("--unit eventbus-rule-probe-10.service -- /bin/true", as: "eventbus", in: container)
                await check(scoped?["code"] as? String == "notAllowed", "a grant for eventbus-rule-* lets no start through: \(String(describing: scoped))", in: container)

                // A grant for questions that name no unit is what lets a start through: polkit
                // is told no unit.
                try await grant(in: container, when: "unit === undefined")
                let anything = try await run("--unit anything-at-all.service --user root --tail 1 -- /usr/bin/id -un", as: "eventbus", in: container)
                await check(anything?["termination"] as? String == "exited" && anything?["tail"] as? [String] == ["root"],
                            "the grant that lets a start through lets eventbus run anything as root: \(String(describing: anything))", in: container)

                // polkit changing its mind between the launcher's question and a start: the run's
                // outcome is systemd's refusal, in its words.
                try await succeed("""
                    systemd-run -q --unit=ebprobe-11 -p User=eventbus sh -c "exec \(Self.probe) --unit eventbus-rule-probe-11.service \
                      --start-when /tmp/start-11 -- /bin/true > /tmp/probe-11.jsonl 2>&1"
                    """, in: container)
                let connected = try await poll {
                    try await lines("/tmp/probe-11.jsonl", in: container).contains { $0["event"] as? String == "connected" }
                }
                await check(connected, "the launcher was made: \(try await container.sh("cat /tmp/probe-11.jsonl").output)", in: container)
                try await grant(in: container, when: "false")
                try await succeed("touch /tmp/start-11", in: container)
                let refused = try await outcome("/tmp/probe-11.jsonl", in: container)
                await check(refused?["termination"] as? String == "failedToStart"
                            && (refused?["reason"] as? String ?? "").contains("Interactive authentication required"),
                            "a refused start: \(String(describing: refused)) \(try await container.sh("cat /tmp/probe-11.jsonl").output)", in: container)
            }
        }

        /// A polkit rule granting `eventbus` systemd's manage-units when `condition` holds
        /// (`unit` is the unit polkit is told of); polkitd restarted so it is in force at once.
        private func grant(in container: Container, when condition: String) async throws {
            try await container.write("/etc/polkit-1/rules.d/50-eventbus-test.rules", """
                polkit.addRule(function(action, subject) {
                    if (action.id == "org.freedesktop.systemd1.manage-units" && subject.user == "eventbus") {
                        var unit = action.lookup("unit");
                        if (\(condition)) { return polkit.Result.YES; }
                    }
                });
                """)
            try await succeed("systemctl restart polkit", in: container)
        }

        /// Puts the built probe beside the package (bound read-only into the container) and
        /// installs it next to eventbusd, whose Swift runtime it loads.
        private func installProbe(in container: Container) async throws {
            guard let built = BuiltExecutable.path(named: "transient-unit-probe") else {
                throw Failure("transient-unit-probe is not built (swift build --build-tests)")
            }
            let prepared = try await ProductionRoot.shared()
            let copy = prepared.packageDirectory + "/transient-unit-probe"
            try? FileManager.default.removeItem(atPath: copy)
            try FileManager.default.copyItem(atPath: built, toPath: copy)
            try await succeed("install -m 0755 \(Container.packageMount)/transient-unit-probe \(Self.probe)", in: container)
        }

        /// Runs the probe to its end (as `user` when given) and returns its outcome line (or the
        /// line saying systemd cannot be used).
        private func run(_ arguments: String, as user: String? = nil, in container: Container) async throws -> [String: Any]? {
            let prefix = user.map { "runuser -u \($0) -- " } ?? ""
            let result = try await container.sh("\(prefix)env LD_LIBRARY_PATH=/usr/lib/eventbus \(Self.probe) \(arguments)")
            let outcome = parse(result.output).first { ["outcome", "unavailable"].contains($0["event"] as? String ?? "") }
            if outcome == nil { Issue.record("no outcome from the probe (\(result.status)): \(result.output)") }
            return outcome
        }

        /// The outcome line of a probe running in the background, once it is there (up to 60 s).
        private func outcome(_ log: String, in container: Container) async throws -> [String: Any]? {
            var found: [String: Any]?
            _ = try await poll {
                found = try await lines(log, in: container).first { $0["event"] as? String == "outcome" }
                return found != nil
            }
            return found
        }

        private func lines(_ log: String, in container: Container) async throws -> [[String: Any]] {
            parse(try await container.sh("cat \(log)").output)
        }

        private func parse(_ output: String) -> [[String: Any]] {
            output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
    }
}
