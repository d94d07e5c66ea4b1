import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

// eventbus-module-worker: runs one handler module for eventbusd in a process of its own
// (`isolation: process`). Spawned by the host (ModuleIsolation.WorkerProcess) with its socket as
// fd 3; not meant to be started by hand.
//
// Arguments: --module NAME --parent PID [--mode run|check|exec] [--memory-limit BYTES] [--cpu-limit SECONDS]
// [--open-files N] [-- PROGRAM ARG…]. `--mode check` loads and checks the module for `eventbusd --check-config`
// instead of running it (LoadCheckMode). `--mode exec` runs no module: it sets what a worker sets
// for itself (death signal, limits, OOM score) and then becomes PROGRAM, an exec module
// (docs/modules-any-language.md), so a program in any language gets them without knowing of them.

/// The OOM score adjustment a worker gives itself (-1000…1000; the host's is usually 0).
let workerOOMScoreAdjustment = 500

func fail(_ message: String, status: Int32) -> Never {
    FileHandle.standardError.write(Data("eventbus-module-worker: \(message)\n".utf8))
    exit(status)
}

var options: [String: String] = [:]
/// What follows `--`: the program `--mode exec` becomes.
var program: [String] = []
var arguments = CommandLine.arguments.dropFirst().makeIterator()
while let key = arguments.next() {
    if key == "--" {
        while let word = arguments.next() { program.append(word) }
        break
    }
    guard key.hasPrefix("--"), let value = arguments.next() else {
        fail("unexpected argument \(key); this program is started by eventbusd", status: 64)
    }
    options[String(key.dropFirst(2))] = value
}
guard let name = options["module"], let parent = options["parent"].flatMap(Int32.init) else {
    fail("needs --module and --parent; this program is started by eventbusd", status: 64)
}

// Die with the host: the kernel sends SIGKILL when the parent goes. If it already went between
// the spawn and here, the signal will never come: leave now.
do { try System.setParentDeathSignal(SIGKILL) } catch {
    fail("prctl(PR_SET_PDEATHSIG): \(error.reason)", status: 71)
}
if getppid() != parent { exit(70) }

// The host's socket is fd 3 (dup2 cleared its close-on-exec flag): set it again, so nothing
// this process starts — the Swift runtime's crash backtracer, or a module's own child — holds
// the host's socket open after this process is gone.
try? System.setCloseOnExec(3)

// A closed socket must be an error return, not a signal.
signal(SIGPIPE, SIG_IGN)

// A fatal signal ends the worker even when it was sent rather than caused (FatalSignals).
FatalSignals.install()

// The host owns this process's life: it asks the module to deactivate over the socket, kills a
// hung worker with SIGKILL, and its own death kills this one (PDEATHSIG above). Signals meant
// for the host that reach its whole process group or cgroup — Ctrl-C or a closed terminal,
// `timeout`, `systemctl stop` under KillMode=control-group — must not end the module before
// the host has deactivated it (they did: "worker crashed: killed by signal 15" at every stop).
for ignored in [SIGINT, SIGTERM, SIGHUP] { signal(ignored, SIG_IGN) }

// Resource limits, before any module code is loaded. `hardExtra` puts the hard limit above the
// soft one: past the CPU limit the kernel sends SIGXCPU (the worker ends with it, which the host
// reports as the CPU limit), and SIGKILL only if the module ignores that for 5 more seconds.
@MainActor func limit(_ resource: __rlimit_resource, _ option: String, hardExtra: rlim_t = 0) {
    guard let text = options[option] else { return }
    guard let value = rlim_t(text) else {
        fail("--\(option) \(text) is not a number", status: 64)
    }
    do { try System.setResourceLimit(resource, soft: UInt64(value), hard: UInt64(value + hardExtra)) } catch {
        fail("setrlimit \(option) \(value): \(error.reason)", status: 71)
    }
}
limit(RLIMIT_DATA, "memory-limit")
limit(RLIMIT_CPU, "cpu-limit", hardExtra: 5)
limit(RLIMIT_NOFILE, "open-files")

// When memory runs out, the kernel's OOM killer picks the process with the highest score: make
// that a worker — whose module is restarted — before eventbusd, which every module and client
// depends on. Raising one's own score needs no privilege; a higher one (set for the host by
// systemd's OOMScoreAdjust=, and inherited) is kept.
if let current = (try? String(contentsOfFile: "/proc/self/oom_score_adj", encoding: .utf8))
    .flatMap({ Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }), current < workerOOMScoreAdjustment {
    try? "\(workerOOMScoreAdjustment)".write(toFile: "/proc/self/oom_score_adj", atomically: false, encoding: .utf8)
}

// `_exit`: the host is gone or done with us; nothing is left to flush, and no module code (nor
// atexit handler of it) should run any more.
switch options["mode"] ?? "run" {
case "run": _exit(WorkerRuntime(socket: 3, name: name).run())
case "check": _exit(LoadCheckMode.run(socket: 3))
case "exec": ExecMode.become(program)
case let mode: fail("--mode \(mode): expected run, check or exec", status: 64)
}
