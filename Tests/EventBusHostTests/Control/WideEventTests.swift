import ControlProtocol
import Dispatch
import Foundation
import Glibc
import Testing

/// An event with tens of thousands of fields (a post under the 1 MiB line limit holds 60 000)
/// must cost the control loop in proportion to its fields, not their square: the loop serves
/// every client, so one such post must not freeze `status` for everyone, once per tail.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct WideEventTests {
    /// Host CPU per field, for 6 000-field events and for 60 000-field events, the same number of
    /// fields in all, four tails reading: linear cost gives the same figure for both (n log n a
    /// little more); the quadratic sort it replaced cost ten times as much per field at 60 000.
    /// CPU time, not wall time, and a ratio measured in one run: a slow or loaded machine
    /// stretches both sides alike.
    @Test func aWideEventCostsTheControlLoopInProportionToItsFields() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        let pid = daemon.process.processIdentifier

        let tailCount = 4
        let small = (fields: 6_000, events: 30), wide = (fields: 60_000, events: 3)
        let tails = try (0..<tailCount).map { _ in try WideTail(socket: socket) }
        #expect(await waitForTailing(socket, count: tailCount))

        let (poster, _) = try rawConnection(socket)
        /// Posts `events` events of `fields` fields each and waits until every tail has read
        /// them; the host's CPU seconds that took.
        func phase(fields: Int, events: Int, whilePosting: () throws -> Void = {}) async throws -> Double {
            let line = wideLine(fields: fields)
            let before = try processCPUSeconds(pid)
            let goal = tails.map { $0.lines + events }
            for _ in 0..<events { try poster.send(line) }
            try whilePosting()
            for _ in 0..<events {
                let answer = try poster.readJSON()
                try #require(answer?["type"]?.stringValue == "posted", "post answered \(String(describing: answer))")
            }
            let read = await eventually(timeout: .seconds(600)) { zip(tails, goal).allSatisfy { $0.lines >= $1 } }
            try #require(read, "the tails did not read the \(fields)-field events")
            return try processCPUSeconds(pid) - before
        }

        _ = try await phase(fields: 100, events: 10)  // warm: first allocations, code paged in
        let smallCPU = try await phase(fields: small.fields, events: small.events)
        var statusSeconds = 0.0
        let wideCPU = try await phase(fields: wide.fields, events: wide.events) {
            // Asked while the host encodes the wide events for the tails.
            let start = ContinuousClock.now
            let status = try ask(socket, ["op": "status"])
            statusSeconds = Double((ContinuousClock.now - start).components.attoseconds) / 1e18
                + Double((ContinuousClock.now - start).components.seconds)
            #expect(status["type"]?.stringValue == "status")
        }
        let perField = (small: smallCPU / Double(small.fields * small.events * tailCount),
                        wide: wideCPU / Double(wide.fields * wide.events * tailCount))
        print("host CPU per field and tail: \(String(format: "%.0f", perField.small * 1e9)) ns at \(small.fields) fields, "
              + "\(String(format: "%.0f", perField.wide * 1e9)) ns at \(wide.fields); status answered in \(String(format: "%.3f", statusSeconds)) s")
        #expect(perField.wide < 3 * perField.small,
                "per field, a 60 000-field event cost \(perField.wide / perField.small)× a 6 000-field one: not linear")
        // That `status` was answered at all during it is the check (a loop frozen for minutes
        // times the request out); its time is printed, not bounded: a loaded machine took 12 s.
        for tail in tails { tail.close() }
    }
}

/// `{"op":"post","name":"wide.event","fields":{"k00000":0,…}}` with `fields` fields, keys in
/// an order that is not sorted (so a sort has work to do).
private func wideLine(fields: Int) -> [UInt8] {
    var text = #"{"op":"post","name":"wide.event","fields":{"#
    for index in 0..<fields {
        if index > 0 { text += "," }
        // Reversed digits: neither sorted nor reverse-sorted.
        text += "\"k\(String(String(format: "%06d", index).reversed()))\":\(index)"
    }
    text += "}}\n"
    return Array(text.utf8)
}

/// User + system CPU seconds of process `pid` so far (`/proc/PID/stat`, in clock ticks).
private func processCPUSeconds(_ pid: Int32) throws -> Double {
    let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
    // Fields after the command's closing parenthesis: state is the 3rd field, utime the 14th.
    guard let close = stat.lastIndex(of: ")") else { throw POSIXError(.EPROTO) }
    let rest = stat[stat.index(after: close)...].split(separator: " ")
    guard rest.count > 12, let user = Double(rest[11]), let system = Double(rest[12]) else { throw POSIXError(.EPROTO) }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// A tail that reads and counts event lines on a thread of its own.
private final class WideTail: @unchecked Sendable {
    private let connection: ControlConnection
    private let lock = NSLock()
    private var count = 0

    var lines: Int { lock.withLock { count } }

    init(socket: String) throws {
        (connection, _) = try rawConnection(socket)
        try connection.send(["op": "subscribe", "patterns": ["wide.>"]])
        guard try connection.readJSON()?["type"]?.stringValue == "subscribed" else { throw POSIXError(.EPROTO) }
        // Between phases nothing comes for as long as the test takes to build the next lines (a
        // loaded run took over a minute, and the 60 s read timeout ended every tail's thread):
        // the reads wait until ``close()`` or the host's end.
        connection.setReceiveTimeout(seconds: 0)
        Thread.detachNewThread { [self] in
            while let line = try? connection.readLine() {
                if line.starts(with: Array(#"{"type":"event""#.utf8)) { lock.withLock { count += 1 } }
            }
        }
    }

    /// Ends the connection; its thread's read then ends.
    func close() { _ = shutdown(connection.fd, Int32(SHUT_RDWR)) }
}
