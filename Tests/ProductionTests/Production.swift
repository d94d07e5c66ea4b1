import Foundation
import Testing
import TestSupport

/// The production suite (docs/production-tests.md): the `.deb` installed in a Debian 12
/// container booted under a real systemd, driven with systemctl, journalctl and the CLI.
///
/// Serialized, every suite below with it: each test boots a container, and this machine has
/// two cores. The first test of a run also builds the package and, when the cached root is
/// missing or stale, runs debootstrap (about 3 minutes): hence the generous time limits, 30
/// minutes a test. They only end a hung test: every wait inside is bounded by ``patience`` or
/// a command's `timeout`.
@Suite(.serialized, .tags(.container), .skippable(.container)) enum Production {
    /// The packaged config with `extra` appended under the top level (and the hello module kept).
    static func config(sources: String = "  timers:\n    - name: heartbeat\n      every: 60s", extra: String = "") -> String {
        """
        control:
          tail_group: eventbus
        sources:
        \(sources)
        modules:
          hello:
            path: /usr/lib/eventbus/modules/libHello.so
            config:
              greeting: hello
        \(extra)
        """
    }

    /// Records an issue saying `message`, with the container's `journalctl -u eventbusd` tail,
    /// unless `condition` holds.
    static func check(_ condition: Bool, _ message: String, in container: Container,
                      sourceLocation: SourceLocation = #_sourceLocation) async {
        guard !condition else { return }
        let journal = await container.journal()
        Issue.record(Comment(rawValue: message + journal), sourceLocation: sourceLocation)
    }

    /// Runs `script` in the container and records an issue (with the journal tail) unless it
    /// exits 0. Returns its result either way.
    @discardableResult
    static func succeed(_ script: String, in container: Container, timeout: Int = patienceSeconds,
                        sourceLocation: SourceLocation = #_sourceLocation) async throws -> ProcessResult {
        let result = try await container.sh(script, timeout: timeout)
        await check(result.status == 0, "`\(script)` exited \(result.status): \(result.output)", in: container,
                    sourceLocation: sourceLocation)
        return result
    }

    /// The events of `eventbus tail PATTERN --since 1 --no-follow --json` (what the host's
    /// replay ring holds), as JSON objects.
    static func replay(_ pattern: String, in container: Container) async throws -> [[String: Any]] {
        let result = try await container.sh("eventbus tail '\(pattern)' --since 1 --no-follow --json")
        return result.output.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  object["type"] as? String == "event" else { return nil }
            return object
        }
    }

    /// Polls `condition` every 100 ms until it holds or ``patience`` passes: the bound only ends
    /// a broken test, never one on a slow machine.
    static func poll(_ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = Date(timeIntervalSinceNow: Double(patienceSeconds))
        while Date() < deadline {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return try await condition()
    }

    /// A shell loop for inside the container: waits (up to `seconds`) until eventbusd.service
    /// has restarted — a new main pid than `oldPID`, active, NRestarts above `restarts`.
    static func waitForRestartScript(oldPID: String, restarts: String, seconds: Int = 40) -> String {
        """
        for i in $(seq \(seconds * 10)); do
          p=$(systemctl show -p MainPID --value eventbusd); s=$(systemctl show -p ActiveState --value eventbusd)
          n=$(systemctl show -p NRestarts --value eventbusd)
          if [ "$p" != 0 ] && [ "$p" != "\(oldPID)" ] && [ "$s" = active ] && [ "$n" -gt "\(restarts)" ]; then
            echo "restarted: pid $p, NRestarts $n"; exit 0
          fi
          sleep 0.1
        done
        echo "no restart: pid $p, state $s, NRestarts $n"; exit 1
        """
    }
}
