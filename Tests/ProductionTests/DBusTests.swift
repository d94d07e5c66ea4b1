import Foundation
import Testing
import TestSupport

extension Production {
    /// The D-Bus source (Sources/EventSources/DBus/README.md) in the packaged eventbusd (user
    /// eventbus) on the container's real system bus: a `sources: dbus:` watch from the config
    /// and one asked for by `eventbus tail --dbus`, both followed by `eventbus tail -o json`.
    @Suite struct DBus {
        private static let sources = """
              dbus:
                - name: probe
                  bus: system
                  match: { interface: org.eventbus.Probe }
                - name: logins
                  preset: sessions
                - name: locks
                  preset: session-lock
            """

        /// `busctl emit` of 300 signals from a root shell: each tail has every one, once, in
        /// order, with its arguments flattened (a string, an int, an `a{sv}`), and the sender
        /// busctl had.
        @Test(.timeLimit(.minutes(30)))
        func emittedSignalsArriveOnceInOrder() async throws {
            try await Container.withInstalled { container in
                try await setUp(container)
                try await succeed("""
                    set -e
                    for i in $(seq 0 299); do
                      busctl emit /org/eventbus/probe org.eventbus.Probe Numbered 'usa{sv}' $i "number $i" 2 even b $([ $((i % 2)) = 0 ] && echo true || echo false) half u $((i / 2))
                    done
                    """, in: container, timeout: 600)
                for log in ["/tmp/dbus-config.jsonl", "/tmp/dbus-cli.jsonl"] {
                    let complete = try await poll {
                        try await events(log, in: container).filter { $0.member == "Numbered" }.count >= 300
                    }
                    let numbered = try await events(log, in: container).filter { $0.member == "Numbered" }
                    await check(complete && numbered.compactMap { $0.fields["arg0"] as? Int } == Array(0..<300),
                                "\(log): 0…299 once each, in order: \(numbered.compactMap { $0.fields["arg0"] as? Int })", in: container)
                    let sample = numbered.first { $0.fields["arg0"] as? Int == 7 }?.fields ?? [:]
                    await check(sample["arg1"] as? String == "number 7" && sample["arg2.even"] as? Bool == false && sample["arg2.half"] as? Int == 3
                                && sample["signature"] as? String == "usa{sv}" && sample["path"] as? String == "/org/eventbus/probe"
                                && (sample["sender"] as? String)?.hasPrefix(":1.") == true,
                                "\(log): signal 7's fields: \(sample)", in: container)
                }
                let status = try await succeed("eventbus status", in: container).output
                await check(status.contains("dbus:bus=system match=interface=org.eventbus.Probe") && status.contains("following system bus"),
                            "status lists the watch, following the system bus: \(status)", in: container)
            }
        }

        /// `systemctl restart dbus`: each watch announces the time it could not see
        /// (`dbus.gap`, with the bus, the reason and how long), then takes signals again.
        @Test(.timeLimit(.minutes(30)))
        func busRestartIsAGapThenSignalsAgain() async throws {
            try await Container.withInstalled { container in
                try await setUp(container)
                try await succeed("""
                    set -e
                    busctl emit /org/eventbus/probe org.eventbus.Probe Before
                    systemctl restart dbus
                    for i in $(seq 100); do busctl emit /org/eventbus/probe org.eventbus.Probe After && break; sleep 0.1; done
                    """, in: container)
                for log in ["/tmp/dbus-config.jsonl", "/tmp/dbus-cli.jsonl"] {
                    // The source may still be reconnecting when the first After is sent: send until one arrives.
                    let back = try await poll {
                        if try await events(log, in: container).contains(where: { $0.member == "After" }) { return true }
                        _ = try await container.sh("busctl emit /org/eventbus/probe org.eventbus.Probe After")
                        return false
                    }
                    // The probe watch's own events (the config tail has the presets' gaps too).
                    let seen = try await events(log, in: container).filter { $0.source == Self.probeSource && $0.member != "Probe" }
                    let before = seen.firstIndex { $0.member == "Before" }
                    let gap = seen.firstIndex { $0.name == "dbus.gap" }
                    let after = seen.firstIndex { $0.member == "After" }
                    await check(back && before != nil && gap != nil && after != nil && before! < gap! && gap! < after!,
                                "\(log): Before, a dbus.gap, then After: \(seen.map(\.line))", in: container)
                    let fields = gap.map { seen[$0].fields } ?? [:]
                    await check(fields["bus"] as? String == "system" && (fields["down_seconds"] as? Double ?? -1) >= 0
                                && !(fields["reason"] as? String ?? "").isEmpty,
                                "\(log): the gap says the bus, why and how long: \(fields)", in: container)
                    await check(seen.filter { $0.name == "dbus.gap" }.count == 1, "\(log): one gap: \(seen.map(\.line))", in: container)
                }
                let status = try await succeed("eventbus status", in: container).output
                await check(status.contains("following system bus"), "following again: \(status)", in: container)
            }
        }

        /// A real logind session (a service with `PAMName=login` for a new user): `session.new`,
        /// `session.lock` and `session.unlock` from `loginctl`, `session.removed` when it ends —
        /// each with the session's id.
        @Test(.timeLimit(.minutes(30)))
        func logindSessionsAreEvents() async throws {
            try await Container.withInstalled { container in
                try await setUp(container)
                let session = try await succeed("""
                    set -e
                    systemctl is-active systemd-logind >/dev/null || systemctl start systemd-logind
                    useradd --create-home ebsession
                    systemd-run -q --unit=eb-session -p PAMName=login -p User=ebsession sleep 600
                    # logind knows the user only once pam_systemd has registered the session.
                    for i in $(seq 100); do id=$(loginctl show-user ebsession -p Sessions --value 2>/dev/null || true); [ -n "$id" ] && break; sleep 0.1; done
                    echo "$id"
                    """, in: container).output.trimmingCharacters(in: .whitespacesAndNewlines)
                try await succeed("""
                    set -e
                    loginctl lock-session \(session)
                    loginctl unlock-session \(session)
                    systemctl stop eb-session
                    """, in: container)
                let log = "/tmp/dbus-config.jsonl"
                let ended = try await poll { try await events(log, in: container).contains { $0.name == "session.removed" } }
                let seen = try await events(log, in: container).filter { $0.name.hasPrefix("session.") }
                await check(ended && seen.map(\.name) == ["session.new", "session.lock", "session.unlock", "session.removed"],
                            "session \(session): new, lock, unlock, removed: \(seen.map(\.line))", in: container)
                await check(seen.allSatisfy { $0.fields["id"] as? String == session },
                            "each names session \(session): \(seen.map(\.line))", in: container)
            }
        }

        // MARK: Helpers

        /// The config's watches, eventbusd, and two tails past their first probe: one of every
        /// `dbus.*`, `session.*` event (the config's sources) and one with its own `--dbus` watch.
        private func setUp(_ container: Container) async throws {
            try await container.write("/etc/eventbus/eventbus.yaml", config(sources: Self.sources))
            try await succeed("""
                set -e
                systemctl restart eventbusd
                systemd-run -q --unit=probe-tail-config sh -c "exec eventbus tail 'dbus.>' 'session.>' -o json > /tmp/dbus-config.jsonl"
                systemd-run -q --unit=probe-tail-cli sh -c "exec eventbus tail --dbus 'interface=org.eventbus.Probe' -o json > /tmp/dbus-cli.jsonl"
                """, in: container)
            for log in ["/tmp/dbus-config.jsonl", "/tmp/dbus-cli.jsonl"] {
                let listening = try await poll {
                    if try await events(log, in: container).contains(where: { $0.member == "Probe" }) { return true }
                    _ = try await container.sh("busctl emit /org/eventbus/probe org.eventbus.Probe Probe")
                    return false
                }
                await check(listening, "\(log): the tail gets a probe: \(try await container.sh("cat \(log); eventbus status").output)", in: container)
                guard listening else { throw Failure("no probe in \(log)") }
            }
        }

        /// The source id of the probe watch, which the config and `tail --dbus` share.
        private static let probeSource = "dbus:bus=system match=interface=org.eventbus.Probe"

        private struct Seen {
            var name: String
            var source: String
            var fields: [String: Any]
            var line: String
            var member: String? { name == "dbus.signal" ? fields["member"] as? String : nil }
        }

        /// The tail's events (`-o json` lines), in order.
        private func events(_ log: String, in container: Container) async throws -> [Seen] {
            try await container.sh("cat \(log)").output.split(separator: "\n").compactMap { line in
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      object["type"] as? String == "event", let event = object["event"] as? [String: Any] ?? Optional(object),
                      let name = event["name"] as? String else { return nil }
                return Seen(name: name, source: event["source"] as? String ?? "", fields: event["fields"] as? [String: Any] ?? [:],
                            line: String(line))
            }
        }
    }
}
