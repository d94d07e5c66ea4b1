import Foundation
import Testing
import TestSupport

extension Production {
    /// An exec module (docs/modules-any-language.md) under the shipped unit — User=eventbus,
    /// ProtectSystem=strict, NoNewPrivileges, the system call filter, MemoryDenyWriteExecute: the
    /// package's shell example runs as its program and answers, a kill of the program is
    /// announced and it restarts, and the Python helper is where `eventbus module new --lang
    /// python` finds it. (The root has no Python: the helper itself runs in ExecModuleTests.)
    @Suite struct ExecModulesUnderTheUnit {
        @Test(.timeLimit(.minutes(30)))
        func theShellExampleAnswersAndIsRestartedAfterAKill() async throws {
            try await Container.withInstalled { container in
                try await succeed("""
                    set -e
                    test -f /usr/share/eventbus/python/eventbus_module.py
                    install -d /usr/local/lib/eventbus/modules
                    install -m 0755 /usr/share/doc/eventbus/examples/modules/disk-alert.sh /usr/local/lib/eventbus/modules/
                    """, in: container)
                try await container.write("/etc/eventbus/eventbus.yaml", config(extra: """
                      disk-alert:
                        exec: ["/usr/local/lib/eventbus/modules/disk-alert.sh"]
                        subscribe: ["user.disk.usage"]
                        config: { threshold: 90 }
                    """))
                try await succeed("systemctl start eventbusd", in: container)
                func program() async throws -> Int? {
                    let answer = try await container.sh("eventbus modules --json").output
                    let object = try? JSONSerialization.jsonObject(with: Data(answer.utf8)) as? [String: Any]
                    let module = (object?["modules"] as? [[String: Any]])?.first { $0["name"] as? String == "disk-alert" }
                    guard module?["state"] as? String == "active", module?["isolation"] as? String == "exec" else { return nil }
                    return module?["pid"] as? Int
                }
                var pid: Int?
                let running = try await poll {
                    pid = try await program()
                    return pid != nil
                }
                await check(running, "disk-alert runs as an exec module", in: container)
                let user = try await container.sh("ps -o user= -p \(pid ?? 0)").output.trimmingCharacters(in: .whitespacesAndNewlines)
                await check(user == "eventbus", "its program runs as the unit's user: \(user)", in: container)

                try await succeed("eventbus post user.disk.usage path=/ percent=95", in: container)
                var alerts: [[String: Any]] = []
                let alerted = try await poll {
                    alerts = try await replay("disk.alert", in: container)
                    return !alerts.isEmpty
                }
                await check(alerted, "the program posted disk.alert", in: container)
                await check(alerts.first?["source"] as? String == "disk-alert"
                            && (alerts.first?["fields"] as? [String: Any])?["percent"] as? Int == 95,
                            "its post: \(alerts)", in: container)

                try await succeed("kill -KILL \(pid ?? 0)", in: container)
                var crashed: [String: Any]?
                let announced = try await poll {
                    crashed = try await replay("module.crashed", in: container).first {
                        ($0["fields"] as? [String: Any])?["module"] as? String == "disk-alert"
                    }
                    return crashed != nil
                }
                await check(announced, "module.crashed for disk-alert", in: container)
                await check((crashed?["fields"] as? [String: Any])?["signal"] as? Int == 9, "killed by SIGKILL: \(String(describing: crashed))",
                            in: container)
                var restarted: Int?
                let again = try await poll {
                    restarted = try await program()
                    return restarted != nil && restarted != pid
                }
                await check(again, "restarted (was \(pid ?? 0), now \(restarted ?? 0))", in: container)
            }
        }
    }
}
