import Foundation
import Testing
import TestSupport

extension Production {
    /// The units source (docs/units.md) against the container's real systemd: the packaged
    /// eventbusd (user eventbus, so through the system bus and dbus-daemon) and a root eventbusd
    /// started by hand (through systemd's private socket), followed with `eventbus tail --units`,
    /// checked against what `busctl monitor` saw of the same signals.
    @Suite struct Units {
        /// Throwaway units that start, restart, stop and fail: every transition once, in order,
        /// the same as systemd's own signals (busctl) with the repeats taken out; jobs with
        /// their results, and their types when finished; the failure with its result and exit
        /// status.
        @Test(.timeLimit(.minutes(30)))
        func everyTransitionOnceInOrder() async throws {
            try await Container.withInstalled { container in
                try await setUp(container)
                try await succeed("""
                    set -e
                    systemctl start ebunit-ok
                    systemctl restart ebunit-ok
                    systemctl stop ebunit-ok
                    systemctl start ebunit-fail
                    for i in $(seq 300); do systemctl is-failed -q ebunit-fail && break; sleep 0.1; done
                    systemctl is-failed ebunit-fail
                    """, in: container)
                for log in ["/tmp/units-bus.jsonl", "/tmp/units-private.jsonl"] {
                    let settled = try await poll {
                        try await events(log, in: container).contains { $0.unit == "ebunit-fail" && $0.newActive == "failed" }
                    }
                    await check(settled, "\(log): the failure arrives: \(try await container.sh("cat \(log)").output)", in: container)
                    let seen = try await events(log, in: container)
                    let signals = try await busctlStates(in: container)
                    for unit in ["ebunit-ok", "ebunit-fail"] {
                        await checkChain(seen, unit: unit, systemd: signals[unit] ?? [], log: log, in: container)
                    }
                    let failure = seen.last { $0.unit == "ebunit-fail" && $0.name == "unit.state" }
                    await check(failure?.fields["result"] as? String == "exit-code" && failure?.fields["exec_main_status"] as? Int == 3
                                && failure?.fields["exec_main_code"] as? Int == 1,
                                "\(log): the failure says exit-code, status 3 (CLD_EXITED): \(String(describing: failure?.fields))", in: container)
                    let jobs = seen.filter { $0.name == "unit.job" && $0.unit == "ebunit-ok" }
                    let finished = jobs.filter { $0.fields["phase"] as? String == "finished" }
                    await check(finished.map { $0.fields["result"] as? String ?? "?" } == ["done", "done", "done"],
                                "\(log): start, restart and stop jobs each finish once, done: \(jobs.map(\.fields))", in: container)
                    // The type is asked of the job when it is queued and comes with its finished event (a
                    // start waits 0.3 s in ExecStartPre); the queued event goes at once, without it.
                    await check(finished.first?.fields["job_type"] as? String == "start",
                                "\(log): the start job says it is one: \(jobs.map(\.fields))", in: container)
                    await check(jobs.filter { $0.fields["phase"] as? String == "queued" }.allSatisfy { $0.fields["job_type"] == nil },
                                "\(log): a queued job has no type yet: \(jobs.map(\.fields))", in: container)
                    // A restart job turns into a start job once its stop part is done: it reads as
                    // either, depending on when the question reached systemd.
                    for (job, expected) in zip(finished, [["start"], ["restart", "start"], ["stop"]]) {
                        if let type = job.fields["job_type"] as? String {
                            await check(expected.contains(type), "\(log): job \(job.fields) is a \(expected)", in: container)
                        }
                    }
                    let invocations = Set(seen.filter { $0.unit == "ebunit-ok" && $0.newActive == "active" }
                        .compactMap { $0.fields["invocation_id"] as? String })
                    await check(invocations.count == 2, "\(log): the start and the restart have two invocation ids: \(invocations)", in: container)
                }
                // A subscriber joining the running watch gets the current state first.
                try await succeed("""
                    eventbus tail --units 'ebunit-*' --json > /tmp/join.jsonl 2>&1 & tail=$!
                    for i in $(seq 600); do grep -q units.synced /tmp/join.jsonl && break; sleep 0.1; done
                    # SIGKILL: the test runner's children inherit a mask that blocks SIGTERM.
                    kill -KILL $tail
                    """, in: container)
                let joined = try await events("/tmp/join.jsonl", in: container)
                let snapshot = joined.prefix { $0.name == "unit.state" }
                await check(snapshot.allSatisfy { $0.fields["origin"] as? String == "snapshot" }
                            && snapshot.contains { $0.unit == "ebunit-fail" && $0.new == "failed/failed" }
                            && joined.dropFirst(snapshot.count).first?.name == "units.synced",
                            "a joining tail starts with the snapshot (ebunit-fail failed), then units.synced: \(joined.map(\.line))", in: container)
                let status = try await succeed("eventbus status", in: container).output
                await check(status.contains("units:match=ebunit-* manager=system"),
                            "the tails share one units source: \(status)", in: container)
            }
        }

        /// `systemctl daemon-reexec`: both hosts announce the blind time (`units.gap`), then
        /// resync; a unit that failed meanwhile is reported (as a change or a resync), and
        /// transitions after it arrive again.
        @Test(.timeLimit(.minutes(30)))
        func reexecIsAGapThenAResync() async throws {
            try await Container.withInstalled { container in
                try await setUp(container)
                try await succeed("""
                    set -e
                    systemctl start ebunit-ok
                    systemctl start ebunit-fail
                    systemctl daemon-reexec
                    for i in $(seq 300); do systemctl is-failed -q ebunit-fail && break; sleep 0.1; done
                    systemctl restart ebunit-ok
                    systemctl stop ebunit-ok
                    """, in: container)
                for log in ["/tmp/units-bus.jsonl", "/tmp/units-private.jsonl"] {
                    let settled = try await poll {
                        try await events(log, in: container).contains { $0.unit == "ebunit-ok" && $0.newActive == "inactive" }
                    }
                    let seen = try await events(log, in: container)
                    await check(settled, "\(log): the stop after the re-execution arrives: \(seen.map(\.line))", in: container)
                    let gap = seen.firstIndex { $0.name == "units.gap" }
                    let resynced = seen.firstIndex { $0.name == "units.synced" && $0.fields["kind"] as? String == "resync" }
                    await check(gap != nil && resynced != nil && gap! < resynced!,
                                "\(log): a units.gap, then a units.synced resync: \(seen.map(\.line))", in: container)
                    await check(seen.contains { $0.unit == "ebunit-fail" && $0.newActive == "failed" },
                                "\(log): the unit that failed around the re-execution is reported: \(seen.map(\.line))", in: container)
                    for unit in ["ebunit-ok", "ebunit-fail"] {
                        await checkChain(seen, unit: unit, systemd: nil, log: log, in: container)
                    }
                }
            }
        }

        /// dbus-daemon restarts: the packaged eventbusd's bus connection closes — a gap, a
        /// reconnection, a resync that reports the unit that failed meanwhile; the root host on
        /// the private socket never lost anything and reports it as a change.
        @Test(.timeLimit(.minutes(30)))
        func busRestartIsAGapForTheBusClientOnly() async throws {
            try await Container.withInstalled { container in
                try await setUp(container)
                try await succeed("""
                    set -e
                    systemctl start ebunit-ok
                    systemctl restart dbus
                    systemctl stop ebunit-ok
                    """, in: container)
                let settled = try await poll {
                    try await events("/tmp/units-bus.jsonl", in: container)
                        .contains { $0.name == "units.synced" && $0.fields["kind"] as? String == "resync" }
                }
                let viaBus = try await events("/tmp/units-bus.jsonl", in: container)
                await check(settled && viaBus.contains { $0.name == "units.gap" },
                            "through the bus: a units.gap, then a resync: \(viaBus.map(\.line))", in: container)
                _ = try await poll {
                    try await events("/tmp/units-private.jsonl", in: container).contains { $0.unit == "ebunit-ok" && $0.new == "inactive/dead" }
                }
                let direct = try await events("/tmp/units-private.jsonl", in: container)
                await check(!direct.contains { $0.name == "units.gap" } && direct.contains { $0.unit == "ebunit-ok" && $0.new == "inactive/dead" },
                            "through the private socket: no gap, the stop as a change: \(direct.map(\.line))", in: container)
                for log in ["/tmp/units-bus.jsonl", "/tmp/units-private.jsonl"] {
                    let seen = try await events(log, in: container)
                    await checkChain(seen, unit: "ebunit-ok", systemd: nil, log: log, in: container)
                    let last = seen.last { $0.unit == "ebunit-ok" && $0.name == "unit.state" }
                    await check(last?.new == "inactive/dead", "\(log): ebunit-ok ends stopped: \(seen.map(\.line))", in: container)
                }
            }
        }

        /// The unit-alerts example module, in a worker of the packaged eventbusd (which asks the
        /// host for the units and files sources), with a `sources.units` watch in the config: a
        /// crash loop kept alive by Restart=always is a flap; once a config file is written, a
        /// unit that fails (the loop, and one that reads the file) is a failure after a change,
        /// once per unit.
        @Test(.timeLimit(.minutes(30)))
        func unitAlertsModuleRaisesItsAlerts() async throws {
            try await Container.withInstalled { container in
                try await container.write("/etc/eventbus/eventbus.yaml", config(
                    sources: "  units:\n    - name: eb-units\n      units: \"eb*\"",
                    extra: """
                      unit-alerts:
                        path: /usr/lib/eventbus/modules/libUnitAlerts.so
                        config:
                          units: ["eb*"]
                          max_starts: 3
                          window_seconds: 120
                          config_paths: [/etc/ebconf]
                    """))
                try await container.write("/run/systemd/system/ebflap.service", """
                    [Unit]
                    StartLimitIntervalSec=0
                    [Service]
                    ExecStart=/bin/sh -c 'sleep 0.2; exit 1'
                    Restart=always
                    RestartSec=200ms
                    """)
                try await container.write("/run/systemd/system/ebconf.service", """
                    [Service]
                    ExecStart=/bin/sh -c 'sleep 0.2; grep -q good /etc/ebconf/app.conf || exit 2'
                    """)
                try await succeed("""
                    set -e
                    mkdir -p /etc/ebconf
                    systemctl daemon-reload
                    systemctl start eventbusd
                    eventbus modules | grep unit-alerts | grep -q active
                    eventbus status | grep -q 'units:match=eb\\* manager=system'
                    """, in: container)
                // The crash loop first: its failures before any change are no failure after one.
                try await succeed("systemctl start ebflap", in: container)
                let flapped = try await poll {
                    try await replay("alert.>", in: container).contains { $0["name"] as? String == "alert.unit.flapping" }
                }
                try await succeed("""
                    set -e
                    echo broken > /etc/ebconf/app.conf
                    systemctl start ebconf
                    """, in: container)
                let raised = try await poll {
                    Set(try await replay("alert.unit.failed_after_change", in: container)
                        .compactMap { ($0["fields"] as? [String: Any])?["unit"] as? String }) == ["ebflap.service", "ebconf.service"]
                }
                // A few more turns of the loop: still one alert for the one change.
                try await succeed("sleep 2; systemctl stop ebflap", in: container)
                let alerts = try await replay("alert.>", in: container)
                await check(flapped && raised, "the flap, then both failures after the change: \(alerts)", in: container)
                let flap = alerts.first { $0["name"] as? String == "alert.unit.flapping" }?["fields"] as? [String: Any]
                await check(flap?["unit"] as? String == "ebflap.service" && flap?["starts"] as? Int == 4,
                            "the flap is ebflap's 4th start: \(String(describing: flap))", in: container)
                let failures = alerts.filter { $0["name"] as? String == "alert.unit.failed_after_change" }
                    .compactMap { $0["fields"] as? [String: Any] }
                await check(failures.count == 2 && failures.allSatisfy { $0["path"] as? String == "/etc/ebconf/app.conf" && $0["result"] as? String == "exit-code" },
                            "one alert per unit for the one change, naming it: \(failures)", in: container)
            }
        }

        /// A stop queues a job, and the source asks systemd for the job's type: the stop's
        /// transition does not wait for the answer. A root eventbusd follows systemd through a
        /// ``DBusRelay`` that holds what eventbusd sends — the question — while the bus's signals
        /// go on: the transition and the job's `queued` event (no type) arrive while the question
        /// is held; once it is let through and answered (the stop waits in ExecStop meanwhile),
        /// the job's `finished` event says `stop`.
        @Test(.timeLimit(.minutes(30)))
        func transitionsDoNotWaitForTheJobsType() async throws {
            try await Container.withInstalled { container in
                try await container.write("/run/systemd/system/ebunit-gate.service", """
                    [Service]
                    ExecStart=/bin/sleep infinity
                    ExecStop=/bin/sh -c 'read line < /run/ebgate'
                    """)
                try await container.write("/tmp/relayed.yaml", """
                    control:
                      socket: /tmp/relayed.sock
                    sources:
                      units:
                        - name: relayed
                          units: ebunit-gate.service
                          manager: "unix:path=/run/ebrelay.sock"
                    """)
                // Started before eventbusd: the stop's is the only job it hears of.
                try await succeed("mkfifo /run/ebgate && systemctl daemon-reload && systemctl start ebunit-gate", in: container)
                let root = "/proc/\(container.leader)/root"
                let relay = try DBusRelay(listeningAt: root + "/run/ebrelay.sock", bus: root + "/run/dbus/system_bus_socket")
                defer { relay.stop() }
                try await succeed("""
                    systemd-run -q --unit=probe-relayed-host "$(command -v eventbusd)" --config /tmp/relayed.yaml
                    for i in $(seq 1200); do eventbus --socket /tmp/relayed.sock status 2>/dev/null | grep -q following && exit 0; sleep 0.1; done
                    eventbus --socket /tmp/relayed.sock status; exit 1
                    """, in: container)
                let threads = try await container.sh("cat /proc/$(systemctl show -p MainPID --value probe-relayed-host)/task/*/comm").output
                await check(threads.split(separator: "\n").contains("eventbus.units"),
                            "the connection's thread is named eventbus.units, as docs/units.md says: \(threads)", in: container)

                relay.hold()
                try await succeed("systemctl stop --no-block ebunit-gate", in: container)
                let stopping = try await poll {
                    let seen = try await relayedEvents(in: container)
                    return seen.contains { $0.name == "unit.state" && $0.newActive == "deactivating" }
                        && seen.contains { $0.name == "unit.job" && $0.fields["phase"] as? String == "queued" }
                }
                let held = relay.heldBytes
                let whileHeld = try await relayedEvents(in: container)
                await check(stopping && held > 0,
                            "the stop's transition and queued job arrive while the question is held (\(held) bytes): \(whileHeld.map(\.line))",
                            in: container)
                let queued = whileHeld.filter { $0.name == "unit.job" }
                await check(queued.count == 1 && Set(queued[0].fields.keys) == ["unit", "job_id", "phase"],
                            "the queued job has no type yet: \(queued.map(\.line))", in: container)

                let answered = relay.replies
                relay.release()
                let answer = try await poll { relay.replies > answered }
                await check(answer, "systemd answers the released question", in: container)
                // The stop can end now: its job is gone only after the answer.
                try await succeed("echo go > /run/ebgate", in: container)
                let finished = try await poll {
                    try await relayedEvents(in: container).contains { $0.name == "unit.job" && $0.fields["phase"] as? String == "finished" }
                }
                let seen = try await relayedEvents(in: container)
                let jobs = seen.filter { $0.name == "unit.job" }
                await check(finished && jobs.count == 2 && jobs[1].fields["job_type"] as? String == "stop"
                            && jobs[1].fields["result"] as? String == "done" && jobs[1].fields["job_id"] as? Int == jobs[0].fields["job_id"] as? Int,
                            "the stop job finishes done, saying it is a stop: \(jobs.map(\.line))", in: container)
                await check(seen.last { $0.name == "unit.state" }?.new == "inactive/dead",
                            "the unit ends stopped: \(seen.map(\.line))", in: container)
            }
        }

        /// The units connection's thread: ordinary in the packaged eventbusd, whose unit forbids
        /// real-time scheduling (`RestrictRealtime=yes`, user eventbus), and real-time
        /// (`SCHED_FIFO`) in a root eventbusd under systemd. (The drop-in docs/service.md gives
        /// cannot be shown here: inside this container a service's `LimitRTPRIO=1` leaves its
        /// `RLIMIT_RTPRIO` at 0.)
        @Test(.timeLimit(.minutes(30)))
        func theUnitsThreadIsRealTimeOnlyWhereTheServiceMayBe() async throws {
            try await Container.withInstalled { container in
                try await container.write("/tmp/root.yaml", """
                    control:
                      socket: /tmp/root.sock
                    """)
                try await succeed("""
                    set -e
                    systemctl start eventbusd
                    systemd-run -q --unit=probe-root-host "$(command -v eventbusd)" --config /tmp/root.yaml
                    for i in $(seq 1200); do [ -S /tmp/root.sock ] && break; sleep 0.1; done
                    systemd-run -q --unit=probe-tail-packaged sh -c "exec eventbus tail --units 'ebunit-*' > /dev/null"
                    systemd-run -q --unit=probe-tail-root sh -c "exec eventbus --socket /tmp/root.sock tail --units 'ebunit-*' > /dev/null"
                    """, in: container)
                // The scheduling policies of a service's eventbus.units threads: field 41 of
                // each one's stat, 0 SCHED_OTHER, 1 SCHED_FIFO.
                func policies(_ service: String) async throws -> [String] {
                    try await container.sh("""
                        pid=$(systemctl show -p MainPID --value \(service))
                        for t in /proc/$pid/task/*; do
                            [ "$(cat $t/comm)" = eventbus.units ] && sed -E 's/^.*\\) //' $t/stat | cut -d' ' -f39
                        done
                        """).output.split(separator: "\n").map(String.init)
                }
                let ordinary = try await poll { try await policies("eventbusd") == ["0"] }
                await check(ordinary, "the packaged eventbusd's units thread is SCHED_OTHER: \(try await policies("eventbusd"))", in: container)
                let realtime = try await poll { try await policies("probe-root-host") == ["1"] }
                await check(realtime, "a root eventbusd's units thread is SCHED_FIFO: \(try await policies("probe-root-host"))", in: container)
            }
        }

        // MARK: Helpers

        /// Two throwaway units, both hosts, busctl and two tails, each tail past its snapshot.
        private func setUp(_ container: Container) async throws {
            try await container.write("/run/systemd/system/ebunit-ok.service", """
                [Service]
                ExecStartPre=/bin/sleep 0.3
                ExecStart=/bin/sleep infinity
                """)
            try await container.write("/run/systemd/system/ebunit-fail.service", """
                [Service]
                ExecStart=/bin/sh -c 'sleep 1; exit 3'
                """)
            try await container.write("/tmp/root.yaml", """
                control:
                  socket: /tmp/root.sock
                """)
            let started = try await succeed("""
                set -e
                systemctl daemon-reload
                systemctl start eventbusd
                systemd-run -q --unit=probe-busctl sh -c "exec busctl monitor --json=short --match \\"type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='/org/freedesktop/systemd1/unit'\\" > /tmp/busctl.jsonl"
                systemd-run -q --unit=probe-root-host "$(command -v eventbusd)" --config /tmp/root.yaml
                for i in $(seq 300); do [ -S /tmp/root.sock ] && break; sleep 0.1; done
                systemd-run -q --unit=probe-tail-bus sh -c "exec eventbus tail --units 'ebunit-*' --json > /tmp/units-bus.jsonl"
                systemd-run -q --unit=probe-tail-private sh -c "exec eventbus --socket /tmp/root.sock tail --units 'ebunit-*' --json > /tmp/units-private.jsonl"
                """, in: container)
            guard started.status == 0 else { throw Failure("setting up the units test failed") }
            for log in ["/tmp/units-bus.jsonl", "/tmp/units-private.jsonl"] {
                let synced = try await poll { try await events(log, in: container).contains { $0.name == "units.synced" } }
                await check(synced, "\(log): the tail gets its snapshot: \(try await container.sh("cat \(log); journalctl -n 30 --no-pager").output)", in: container)
                guard synced else { throw Failure("no snapshot in \(log)") }
            }
            // busctl has no ready signal; its match is in place well within this.
            try await Task.sleep(for: .seconds(1))
        }

        private struct Seen {
            var name: String
            var unit: String?
            var fields: [String: Any]
            var line: String
            var newActive: String? { fields["active_state"] as? String }
            var new: String { "\(fields["active_state"] as? String ?? "?")/\(fields["sub_state"] as? String ?? "?")" }
            var old: String? {
                (fields["old_active_state"] as? String).map { "\($0)/\(fields["old_sub_state"] as? String ?? "?")" }
            }
        }

        /// The tail's events (`--json` lines), in order.
        private func events(_ log: String, in container: Container) async throws -> [Seen] {
            parse(try await container.sh("cat \(log)").output)
        }

        /// The `unit.*` events the relayed host (`transitionsDoNotWaitForTheJobsType`) holds in its
        /// replay ring, in order.
        private func relayedEvents(in container: Container) async throws -> [Seen] {
            parse(try await container.sh("eventbus --socket /tmp/relayed.sock tail 'unit.>' --since 1 --no-follow --json").output)
        }

        /// `--json` lines of `eventbus tail`: its events, in order.
        private func parse(_ lines: String) -> [Seen] {
            lines.split(separator: "\n").compactMap { line in
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      object["type"] as? String == "event", let event = object["event"] as? [String: Any] ?? Optional(object),
                      let name = event["name"] as? String else { return nil }
                let fields = event["fields"] as? [String: Any] ?? [:]
                return Seen(name: name, unit: (fields["unit"] as? String).map { $0.replacingOccurrences(of: ".service", with: "") },
                            fields: fields, line: String(line))
            }
        }

        /// (ActiveState/SubState) of each unit's `org.freedesktop.systemd1.Unit` signals, as
        /// `busctl monitor` printed them, repeats kept.
        private func busctlStates(in container: Container) async throws -> [String: [String]] {
            var states: [String: [String]] = [:]
            for line in try await container.sh("cat /tmp/busctl.jsonl").output.split(separator: "\n") {
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      let path = object["path"] as? String, let payload = object["payload"] as? [String: Any],
                      let data = payload["data"] as? [Any], data.first as? String == "org.freedesktop.systemd1.Unit",
                      let properties = data.dropFirst().first as? [String: Any],
                      let active = (properties["ActiveState"] as? [String: Any])?["data"] as? String,
                      let sub = (properties["SubState"] as? [String: Any])?["data"] as? String else { continue }
                let unit = path.replacingOccurrences(of: "/org/freedesktop/systemd1/unit/", with: "")
                    .replacingOccurrences(of: "_2d", with: "-").replacingOccurrences(of: "_2eservice", with: "")
                states[unit, default: []].append("\(active)/\(sub)")
            }
            return states
        }

        /// The unit's `unit.state` changes chain up (each starts where the one before ended, none
        /// repeats a state), after its snapshot; with `systemd` (busctl's states), they are exactly
        /// those states with consecutive repeats taken out.
        private func checkChain(_ seen: [Seen], unit: String, systemd: [String]?, log: String, in container: Container,
                                sourceLocation: SourceLocation = #_sourceLocation) async {
            let states = seen.filter { $0.name == "unit.state" && $0.unit == unit }
            let changes = states.filter { $0.fields["origin"] as? String != "snapshot" }
            var current = states.first { $0.fields["origin"] as? String == "snapshot" }?.new ?? "inactive/dead"
            let start = current
            for change in changes {
                await check(change.old == current && change.new != current,
                            "\(log): \(unit) goes on from \(current), without a repeat: \(change.line)\nall: \(states.map(\.line))",
                            in: container, sourceLocation: sourceLocation)
                current = change.new
            }
            guard let systemd else { return }
            var expected: [String] = []
            var last = start
            for state in systemd where state != last {
                expected.append(state)
                last = state
            }
            await check(changes.map(\.new) == expected,
                        "\(log): \(unit)'s transitions are systemd's signals without repeats\nseen:     \(changes.map(\.new))\nexpected: \(expected) (from \(systemd))",
                        in: container, sourceLocation: sourceLocation)
        }
    }
}
