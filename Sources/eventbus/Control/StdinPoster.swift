import ControlProtocol
import Glibc

/// `eventbus post --stdin`: posts one event per input line over one connection.
///
/// Lines go out in batches: up to ``ControlProtocol/maximumPostBatch`` lines become one `post`
/// request with `events`, each line's bytes copied in as they are once it parsed here — so a
/// line that is not a `{"name", "fields"}` object is reported with its number and never spoils
/// its batch. The host parses a batch once and answers with one sequence number per line, or
/// an error by index, which is reported with that line; the other lines are posted all the
/// same. One batch is in flight while the next is read and checked, so the parsing here and
/// the posting there overlap; the answers in flight (a few KiB) always fit the socket's buffer,
/// so neither side waits for the other to read.
struct StdinPoster {
    let connection: ControlConnection
    /// Whether each posted line's cursor (``EventCursor``: the host's `life`, its number) is printed.
    let printSequences: Bool
    let life: String?

    /// Lines sent together, and the complaints about lines among them that were not sent.
    private struct Batch {
        var lines: [Int] = []
        var request = PostBatchWriter()
        var refused: [(line: Int, message: String)] = []
    }

    /// Posts everything on standard input; returns how many lines failed.
    func run() throws -> Int {
        var input = LineReader.standardInput()
        var failed = 0
        var lineNumber = 0
        var building = Batch()
        var inFlight: Batch?
        var output = StandardOutput()

        /// Reads the answer to the batch in flight and reports it: sequence numbers to standard
        /// output, refused lines (here and by the host) to standard error in line order.
        func settle() throws {
            guard var batch = inFlight else { return }
            inFlight = nil
            if !batch.lines.isEmpty {
                guard let answer = try connection.readJSON() else {
                    throw CommandError("eventbusd closed the connection before answering every post")
                }
                try HostConnection.throwIfError(answer)  // the whole batch refused: forbidden, say
                guard case .postedBatch(let posted)? = try? ControlResponse.decode(answer), posted.items.count == batch.lines.count else {
                    throw CommandError("eventbusd answered a batch of \(batch.lines.count) posts without a sequence number for each")
                }
                for (index, item) in posted.items.enumerated() {
                    switch item {
                    case .posted(let sequence):
                        if printSequences { output.append(EventCursor(life: life, sequence: sequence).description + "\n") }
                    case .refused(let refusal):
                        batch.refused.append((batch.lines[index], refusal.message))
                    }
                }
            }
            output.flush()
            failed += batch.refused.count
            if !batch.refused.isEmpty {
                printError(batch.refused.sorted { $0.line < $1.line }.map { "stdin:\($0.line): \($0.message)" }.joined(separator: "\n"))
            }
        }

        func send() throws {
            if !building.lines.isEmpty {
                try connection.send(building.request.finish())
            }
            try settle()  // the previous batch, while the host works on this one
            inFlight = building
            building = Batch()
        }

        while try input.next({ line in
            lineNumber += 1
            guard line.contains(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0D }) else { return }
            if let problem = Self.problem(line) {
                building.refused.append((lineNumber, problem))
                return
            }
            // A request is one line of at most maximumLineLength: a line that does not fit the
            // batch starts the next one, and one that fits no batch is refused here.
            if PostBatchWriter.framing + line.count > ControlProtocol.maximumLineLength {
                building.refused.append((lineNumber, "longer than a request may be (\(ControlProtocol.maximumLineLength) bytes with its framing)"))
                return
            }
            if !building.lines.isEmpty, building.request.length(adding: line.count) > ControlProtocol.maximumLineLength {
                try send()
            }
            building.request.append(line)
            building.lines.append(lineNumber)
        }) {
            if building.lines.count == ControlProtocol.maximumPostBatch { try send() }
        }
        try send()
        try settle()
        return failed
    }

    /// Why `line` is not a `{"name": …, "fields": {…}}` object, or nil; the host checks the
    /// name and the fields' values.
    private static func problem(_ line: UnsafeBufferPointer<UInt8>) -> String? {
        let value: JSON
        do { value = try JSON.parse(line) } catch { return "\(error)" }
        guard case .object(let members) = value else { return "a line is a JSON object, found \(value.kindName)" }
        return PostedEvent.itemProblem(members, in: "a line")
    }
}
