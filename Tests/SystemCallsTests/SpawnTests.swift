import Glibc
import SystemCalls
import Testing
import TestSupport

/// ``System/spawn(_:arguments:environment:setup:)`` and the calls that follow a child, against
/// real processes: the child gets exactly the descriptors it is handed, leads its own group when
/// asked, and stays unreaped until ``System/waitForExit(of:)``.
@Suite struct SpawnTests {
    /// Runs `/bin/sh -c script` with its standard output on a pipe; its output and wait status.
    private func run(_ script: String, _ configure: (inout System.SpawnSetup) -> Void = { _ in }) throws -> (output: String, pid: pid_t, status: Int32) {
        let pipe = try System.makePipe()
        defer { System.close(pipe.read) }
        var setup = System.SpawnSetup()
        setup.descriptors = [(child: 1, parent: pipe.write)]
        configure(&setup)
        let pid: pid_t
        do {
            defer { System.close(pipe.write) }
            pid = try System.spawn("/bin/sh", arguments: ["sh", "-c", script], setup: setup)
        }
        let output = try System.readToEnd(pipe.read)
        return (String(decoding: output, as: UTF8.self), pid, try System.waitForExit(of: pid))
    }

    @Test func aDescriptorWithoutCloseOnExecReachesTheChildUnlessClosedFrom() throws {
        let inherited = dup(STDIN_FILENO)  // not close-on-exec, as a descriptor another library opened may be
        try #require(inherited > 2)
        defer { System.close(inherited) }
        let probe = "test -e /proc/self/fd/\(inherited) && echo open || echo closed"
        #expect(try run(probe).output == "open\n")
        #expect(try run(probe) { $0.closeFrom = 3 }.output == "closed\n")
    }

    @Test func aChildInItsOwnGroupLeadsIt() throws {
        // Field 5 of /proc/PID/stat is the process group (the command, "sh", has no space).
        let script = "cut -d' ' -f5 /proc/$$/stat"
        let alone = try run(script) { $0.ownProcessGroup = true }
        #expect(alone.output == "\(alone.pid)\n")
        let joined = try run(script)
        #expect(joined.output == "\(getpgrp())\n")
    }

    @Test func anEndedChildStaysUnreapedUntilWaitedFor() async throws {
        let pid = try System.spawn("/bin/sh", arguments: ["sh", "-c", "exit 3"])
        #expect(await eventually { (try? System.hasEnded(pid)) == true })
        #expect(try System.hasEnded(pid, waiting: true))  // still there to be seen again
        let status = try System.waitForExit(of: pid)
        #expect((status >> 8) & 0xFF == 3)
        #expect(throws: System.CallError.self) { try System.hasEnded(pid) }  // reaped: ECHILD
    }

    @Test func aMissingExecutableIsTheSpawnsError() throws {
        let error = try #require(throws: System.CallError.self) {
            try System.spawn("/nonexistent/program", arguments: ["program"])
        }
        #expect(error.call == "posix_spawn" && error.errno == ENOENT)
    }
}
