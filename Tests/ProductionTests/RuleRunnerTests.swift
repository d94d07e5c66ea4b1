import Foundation
import Testing
import TestSupport

extension Production {
    /// `eventbus-rule-runner` under the container's real systemd (docs/rules-privileges.md): the
    /// packaged eventbusd, as `eventbus`, whom systemd refuses its units, runs a rule's command
    /// as a transient unit through root's helper, as the rule's `user:`; and the helper answers
    /// nobody but root and `eventbus`, and nothing but the rules root configured.
    @Suite struct RuleRunner {
        static let rules = """
            rules:
              - name: note
                on: user.note
                then:
                  - log: "note from {{who}}"
                  - run: ['/bin/sh', '-c', 'id -un; cat']
                    user: daemon
                    properties: { PrivateTmp: "yes" }
              - name: hold
                on: user.hold
                run: ['/bin/sh', '-c', 'echo "held as $(id -un)"; exec sleep 300']
                user: daemon
            """

        /// A rule fired by `eventbus post` runs as `eventbus-rule-<rule>-<run>.service`, listed by
        /// systemctl, as `daemon`, its output in the journal and in `action.finished`; stopping
        /// eventbusd stops the unit (the client's `stop`, the runner's StopUnit).
        @Test(.timeLimit(.minutes(30)))
        func aPostedEventRunsItsRuleAsATransientUnitAsTheRulesUser() async throws {
            try await Container.withInstalled { container in
                try await container.write("/etc/eventbus/eventbus.yaml", Production.config(extra: Self.rules))
                try await succeed("systemctl restart eventbusd", in: container)
                let chosen = try await poll {
                    try await container.sh("journalctl -u eventbusd -o cat").output.contains("through eventbus-rule-runner")
                }
                await check(chosen, "eventbusd says its rules run through eventbus-rule-runner", in: container)
                let user = try await container.property("User")
                await check(user == "eventbus", "eventbusd runs as eventbus, not \(user)", in: container)

                try await succeed("eventbus post user.note who=tester", in: container)
                var finished: [String: Any]?
                _ = try await poll {
                    // Action 2, the run: (action 1, the log:, finishes first).
                    finished = try await replay("action.finished", in: container).first { event in
                        let fields = event["fields"] as? [String: Any]
                        return fields?["rule"] as? String == "note" && fields?["action"] as? Int == 2
                    }
                    return finished != nil
                }
                let fields = finished?["fields"] as? [String: Any] ?? [:]
                let output = fields["output"] as? String ?? ""
                await check(fields["outcome"] as? String == "success" && fields["action"] as? Int == 2,
                            "the note rule's run action succeeded: \(String(describing: finished))", in: container)
                await check(output.hasPrefix("daemon\n") && output.contains(#""name":"user.note""#) && output.contains(#""who":"tester""#),
                            "it ran as daemon and read the event on its standard input: \(output)", in: container)
                let started = try await replay("action.started", in: container)
                    .first { ($0["fields"] as? [String: Any])?["rule"] as? String == "note" }?["fields"] as? [String: Any]
                let noteUnit = started?["unit"] as? String ?? ""
                await check(noteUnit.hasPrefix("eventbus-rule-note-") && noteUnit.hasSuffix(".service") && (started?["pid"] as? Int ?? 0) > 0,
                            "action.started names the unit and its pid: \(String(describing: started))", in: container)
                let noteJournal = try await container.sh("journalctl -o cat _SYSTEMD_UNIT=\(noteUnit) + UNIT=\(noteUnit)").output
                await check(noteJournal.contains("daemon"), "its output is in the journal under \(noteUnit): \(noteJournal)", in: container)

                try await succeed("eventbus post user.hold", in: container)
                var unit = ""
                let running = try await poll {
                    let listed = try await container.sh("systemctl list-units --all --plain --no-legend 'eventbus-rule-hold-*'").output
                    unit = listed.split(separator: " ").first.map(String.init) ?? ""
                    return listed.contains("running")
                }
                await check(running, "the hold rule's unit is listed running: \(try await container.sh("systemctl list-units --all 'eventbus-rule-*'").output)", in: container)
                let shown = try await container.sh("systemctl show -p User -p MainPID -p Type \(unit)").output
                await check(shown.contains("User=daemon") && shown.contains("Type=exec"), "\(unit) is daemon's: \(shown)", in: container)
                let pid = try await container.sh("systemctl show -p MainPID --value \(unit)").output.trimmingCharacters(in: .whitespacesAndNewlines)
                let owner = try await container.sh("ps -o user= -p \(pid)").output.trimmingCharacters(in: .whitespacesAndNewlines)
                await check(owner == "daemon", "its main process (\(pid)) runs as daemon, not \(owner)", in: container)
                // The runner waits for the run's end: root without a single capability.
                let runner = try await container.sh("for pid in $(pgrep -f /usr/lib/eventbus/eventbus-rule-runner); do grep -E '^(Uid|CapEff|CapBnd)' /proc/$pid/status; done").output
                await check(runner.contains("Uid:\t0\t0\t0\t0") && runner.contains("CapEff:\t0000000000000000") && runner.contains("CapBnd:\t0000000000000000"),
                            "the runner is root with no capability: \(runner)", in: container)
                let held = try await poll {
                    try await container.sh("journalctl -o cat -u \(unit)").output.contains("held as daemon")
                }
                await check(held, "its output is in the journal", in: container)

                try await succeed("systemctl stop eventbusd", in: container)
                let gone = try await poll {
                    try await container.sh("systemctl list-units --all --plain --no-legend 'eventbus-rule-hold-*'").output
                        .trimmingCharacters(in: .whitespacesAndNewlines).isEmpty
                }
                await check(gone, "stopping eventbusd stopped \(unit): \(try await container.sh("systemctl status \(unit)").output)", in: container)
                let runnerLog = try await container.sh("journalctl -o cat -u 'eventbus-rule-runner@*'").output
                await check(runnerLog.contains("rule note action 2") && runnerLog.contains("rule hold action 1"),
                            "the runner logged both runs: \(runnerLog)", in: container)

                let exposure = try await container.sh("""
                    systemd-analyze security eventbus-rule-runner@0.service --no-pager; systemd-analyze security eventbusd.service --no-pager | grep 'Overall exposure'
                    """).output
                print("systemd-analyze security:\n\(exposure)")
            }
        }

        /// The runner's socket keeps out users outside the eventbus group; a member of the group
        /// who is not `eventbus` gets `refused_peer`; `eventbus` itself gets an error for a rule
        /// or action root did not configure and for a request that names a command.
        @Test(.timeLimit(.minutes(30)))
        func theRunnerRefusesOtherPeersAndAnythingButConfiguredRunActions() async throws {
            try await Container.withInstalled { container in
                try await container.write("/etc/eventbus/eventbus.yaml", Production.config(extra: Self.rules))
                try await succeed("systemctl start eventbus-rule-runner.socket && useradd --system --no-create-home -G eventbus tester", in: container)
                // perl-base (Essential in Debian) is the client: one request line in, one answer line out.
                try await container.write("/tmp/ask.pl", """
                    use IO::Socket::UNIX;
                    my $s = IO::Socket::UNIX->new(Peer => "/run/eventbus-rule-runner.sock") or do { print "connect: $!\\n"; exit 0 };
                    my $request = <STDIN>;
                    print $s $request;
                    my $answer = <$s>;
                    print defined $answer ? $answer : "no answer\\n";
                    """)
                let event = #"{"type":"event","seq":1,"name":"user.note","source":"user","time":"2026-11-29T08:00:00.000000Z","mono":1,"fields":{"who":"x"}}"#
                func ask(_ request: String, as user: String) async throws -> String {
                    try await container.write("/tmp/request.json", request)
                    return try await container.sh("runuser -u \(user) -- perl /tmp/ask.pl < /tmp/request.json").output
                }
                let run = #"{"op":"run","rule":"note","action":2,"run":"t-1","events":[\#(event)]}"#

                let outsider = try await ask(run, as: "nobody")
                await check(outsider.contains("connect: Permission denied"), "nobody cannot connect: \(outsider)", in: container)
                let member = try await ask(run, as: "tester")
                await check(member.contains(#""code":"refused_peer""#), "a member of the group who is not eventbus is refused: \(member)", in: container)

                let unknown = try await ask(#"{"op":"run","rule":"no-such-rule","action":1,"run":"t-2","events":[\#(event)]}"#, as: "eventbus")
                await check(unknown.contains(#""code":"no_such_rule""#), "an unknown rule: \(unknown)", in: container)
                let logAction = try await ask(#"{"op":"run","rule":"note","action":1,"run":"t-3","events":[\#(event)]}"#, as: "eventbus")
                await check(logAction.contains(#""code":"not_a_run_action""#), "a log: action is no run: action: \(logAction)", in: container)
                let command = try await ask(#"{"op":"run","rule":"note","action":2,"run":"t-4","events":[\#(event)],"argv":["/bin/sh","-c","id"],"user":"root"}"#, as: "eventbus")
                await check(command.contains(#""code":"bad_request""#) && command.contains("argv"), "a request naming a command: \(command)", in: container)
                let forged = try await ask(#"{"op":"run","rule":"note","action":2,"run":"t-5","events":[\#(event.replacingOccurrences(of: "user.note", with: "user.other"))]}"#, as: "eventbus")
                await check(forged.contains(#""code":"bad_event""#), "an event the rule does not take: \(forged)", in: container)
                let accepted = try await ask(run, as: "eventbus")
                await check(accepted.contains(#""type":"started""#) && accepted.contains("eventbus-rule-note-t-1.service"),
                            "eventbus may run the configured action: \(accepted)", in: container)

                let log = try await container.sh("journalctl -o cat -u 'eventbus-rule-runner@*'").output
                await check(log.contains("refused uid") && log.contains("no rule \"no-such-rule\""), "the runner logged the refusals: \(log)", in: container)


            }
        }
    }
}
