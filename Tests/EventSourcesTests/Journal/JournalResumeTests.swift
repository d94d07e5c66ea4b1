import EventBusKit
import EventSources
import Foundation
import Testing

@Suite("Journal: exact resume across SIGKILL", .serialized)
struct JournalResumeTests {
    /// One run of the consumer fixture: what it printed and the position persisted when it died.
    struct Run {
        var lines: [(message: String, cursor: String)]
        var gaps: Int
        var persisted: String?
        var status: Int32
        var killedAfter: Int  // ms; 0 for the last run, which ends by itself
    }

    @Test("SIGKILL at random points, 24 times, while entries are written: resumes right after the persisted position every time; together the runs deliver every entry exactly once")
    func sigkillAndResume() async throws {
        let journald = try await PrivateJournald.start()
        let state = try TemporaryDirectory("eventbus-journal-test")
        let output = try TemporaryDirectory("eventbus-journal-test")
        let runCount = 25
        let chunk = 160
        let total = runCount * chunk
        let identifier = "resume"
        let expected = (0..<total).map { "entry \($0)" }
        let writer = JournalWriter(socket: journald.socketPath)

        var runs: [Run] = []
        var generator = SystemRandomNumberGenerator()
        for iteration in 0..<runCount {
            let last = iteration == runCount - 1
            let path = output.path + "/run-\(iteration).out"
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            let pid = try journalSpawn([JournalBuildProducts.consumerFixture, journald.logDirectory, state.path,
                                        "resume", identifier, expected.last!], stdout: fd)
            close(fd)
            // Each run gets the next chunk written while it runs, in small bursts, so kills land
            // while entries are being read, delivered, acknowledged — or awaited. The last entry
            // comes only in the last run, which ends by itself after acknowledging it.
            let messages = Array(expected[(iteration * chunk)..<((iteration + 1) * chunk)])
            let writing = Task.detached {
                for (index, message) in messages.enumerated() {
                    writer.send(message, identifier: identifier)
                    if index % 10 == 9 { try? await Task.sleep(for: .milliseconds(8)) }
                }
            }
            var delay = 0
            var status: Int32?
            if last {
                await writing.value
                status = await journalWaitAsync(pid, timeout: patience)
                if status == nil { kill(pid, SIGKILL); _ = await journalWaitAsync(pid) }
            } else {
                // Killed once it has printed a chosen number of lines (as many as its chunk at
                // most), however fast the machine runs: the kills land at many points of the
                // stream by construction. A run that cannot get there within a minute is
                // killed then.
                let target = Int.random(in: 1...chunk, using: &generator)
                let started = ContinuousClock.now
                while lineCount(path) < target, ContinuousClock.now - started < .seconds(60) {
                    try await Task.sleep(for: .milliseconds(2))
                }
                try await Task.sleep(for: .microseconds(Int.random(in: 0...3_000, using: &generator)))
                let elapsed = (ContinuousClock.now - started).components
                delay = Int(elapsed.seconds * 1_000 + elapsed.attoseconds / 1_000_000_000_000_000)
                kill(pid, SIGKILL)
                status = await journalWaitAsync(pid)
                await writing.value
            }
            let text = try String(contentsOfFile: path, encoding: .utf8)
            var run = Run(lines: [], gaps: 0, persisted: nil, status: status ?? -1, killedAfter: delay)
            for line in text.split(separator: "\n") {
                let parts = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
                if parts.first == "GAP" { run.gaps += 1 } else { run.lines.append((parts[0], parts[1])) }
            }
            run.persisted = (try? String(contentsOfFile: state.path + "/resume.cursor", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines)
            runs.append(run)
        }

        // Replay the runs against the written sequence.
        var acknowledged = -1  // index of the entry at the persisted position
        var delivered: [String] = []  // what the consumer completed, in order, over all runs
        for (number, run) in runs.enumerated() {
            let context = "run \(number) (killed after \(run.killedAfter) ms, \(run.lines.count) lines)"
            #expect(run.gaps == 0, "\(context): no gap notice")
            // Each run starts exactly after the persisted position and goes on without holes.
            let messages = run.lines.map(\.message)
            #expect(messages == Array(expected[(acknowledged + 1)..<min(total, acknowledged + 1 + messages.count)]),
                    "\(context)")
            // Where it died: the persisted cursor is the last line or the one before (an entry
            // printed but not yet acknowledged when the kill came), or unchanged if it
            // acknowledged nothing.
            var now = acknowledged
            if let cursor = run.persisted, let index = run.lines.lastIndex(where: { $0.cursor == cursor }) {
                now = acknowledged + 1 + index
            }
            #expect(run.lines.count - (now - acknowledged) <= 1, "\(context): at most one entry unacknowledged")
            delivered += messages.prefix(now - acknowledged)
            acknowledged = now
        }
        #expect(runs.last?.status == 0)
        #expect(delivered == expected, "every entry exactly once")
        let killed = runs.dropLast().filter { $0.status == 128 + SIGKILL }.count
        #expect(killed == runCount - 1)
        // The kills landed at many different points of the stream, not all before the start.
        #expect(Set(runs.dropLast().map(\.lines.count)).count > 5)
    }
}

/// The lines of a file written so far (0 if it cannot be read).
private func lineCount(_ path: String) -> Int {
    guard let data = FileManager.default.contents(atPath: path) else { return 0 }
    return data.reduce(0) { $0 + ($1 == UInt8(ascii: "\n") ? 1 : 0) }
}
