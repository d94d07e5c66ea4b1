import Foundation
import Testing
import TestSupport

extension Production {
    /// The shipped unit's sandbox: `systemd-analyze security` rates it, and everything still
    /// works inside it.
    @Suite struct UnitHardening {
        /// The exposure level systemd gives the shipped unit stays at 1.5 or below: what the unit
        /// before had while it allowed no network at all. What is left open is a feature each: TCP anywhere (a NATS server, the metrics listener), read access to
        /// home directories (file watches), the systemd-journal group (journal watches) and
        /// real peer uids (`PrivateUsers=` would make every client uid 65534 to the control
        /// socket's checks), and `@resources` system calls (Dispatch renices its threads, and
        /// logs each refusal). docs/production-tests.md lists the trade.
        @Test(.timeLimit(.minutes(30)))
        func exposureLevelStaysWhereEveryFeatureStillWorks() async throws {
            try await Container.withInstalled("[Service]") { container in
                let analysis = try await container.sh("systemd-analyze security eventbusd.service --no-pager")
                let line = analysis.output.split(separator: "\n").first { $0.contains("Overall exposure level") } ?? ""
                // "→ Overall exposure level for eventbusd.service: 1.1 OK 🙂" (":-)" without UTF-8)
                let level = line.range(of: "eventbusd.service: ").flatMap {
                    line[$0.upperBound...].split(separator: " ").first.flatMap { Double($0) }
                }
                let open = analysis.output.split(separator: "\n").filter { $0.hasPrefix("✗") }.joined(separator: "\n")
                #expect(level != nil && level! <= 1.5, "exposure level \(level.map { "\($0)" } ?? "?") (\(line)); still open:\n\(open)")
            }
        }

        /// Inside that sandbox: the hello module in its worker process, a journal watch, a file
        /// watch, the metrics listener (TCP), and a client of the eventbus group that is not
        /// root (peer credentials must still name its groups).
        @Test(.timeLimit(.minutes(30)))
        func everythingWorksInsideTheSandbox() async throws {
            try await Container.withInstalled { container in
                try await succeed("""
                    mkdir -p /srv/ebwatch && chmod 0755 /srv/ebwatch
                    useradd --system --no-create-home --groups eventbus,systemd-journal ebclient
                    """, in: container)
                try await container.write("/etc/eventbus/eventbus.yaml", config(
                    sources: "  timers:\n    - name: heartbeat\n      every: 60s\n  journal:\n    - name: app\n      identifier: ebharden\n  files:\n    - name: watched\n      path: /srv/ebwatch",
                    extra: "metrics:\n  listen: 127.0.0.1:9464"))
                try await succeed("systemctl start eventbusd", in: container)

                let modules = try await succeed("eventbus modules", in: container).output
                let hello = modules.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("hello") } ?? ""
                await check(hello.contains("active") && hello.contains("process"), "hello active in a worker: \(modules)", in: container)

                try await succeed("""
                    eventbus post user.sandboxed
                    echo "ebharden sandboxed" | systemd-cat -t ebharden
                    touch /srv/ebwatch/created
                    """, in: container)
                var names: [String] = []
                var messages: [String] = []
                let seen = try await poll {
                    let events = try await replay(">", in: container)
                    names = events.compactMap { $0["name"] as? String }
                    messages = events.compactMap { ($0["fields"] as? [String: Any])?["message"] as? String }
                    return names.contains("hello.greeted") && messages.contains("ebharden sandboxed")
                        && names.contains { $0.hasPrefix("file") || $0.hasPrefix("fs.") }
                }
                await check(seen, "a greeting, the journal line and the file event; replay holds \(names), messages \(messages)", in: container)

                let metrics = try await container.sh("""
                    exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/9464 && printf "GET /metrics HTTP/1.0\\r\\n\\r\\n" >&3 && cat <&3'
                    """)
                await check(metrics.output.hasPrefix("HTTP/1.") && metrics.output.contains("eventbus_"),
                            "the metrics listener answers: \(metrics.output.prefix(300))", in: container)

                // A client's own rights are judged by its peer credentials (SO_PEERCRED,
                // SO_PEERGROUPS), which must survive the unit's sandbox: a non-root member of
                // eventbus and systemd-journal may tail, and may tail the journal.
                let client = try await container.sh("""
                    runuser -u ebclient -- eventbus status >/dev/null && echo STATUS-OK
                    runuser -u ebclient -- eventbus tail 'journal.>' --since 1 --no-follow
                    runuser -u ebclient -- timeout 3 eventbus tail --journal eventbusd.service --lines 3
                    """)
                await check(client.output.contains("STATUS-OK") && client.output.contains("ebharden sandboxed"),
                            "a non-root member of eventbus and systemd-journal may use the CLI: \(client.output)", in: container)
                await check(!client.output.contains("may not read the journal") && !client.output.contains("rror"),
                            "it may tail the journal through eventbusd: \(client.output)", in: container)

                let denied = try await container.sh("journalctl -u eventbusd -o cat | grep -i -e 'operation not permitted' -e 'permission denied' -e SIGSYS")
                await check(denied.output.isEmpty, "nothing refused by the sandbox: \(denied.output)", in: container)
            }
        }
    }
}
