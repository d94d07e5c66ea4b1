import ControlProtocol
import Glibc

/// `eventbus post --stdin`: posts one event per input line over one connection.
///
/// Requests go out in windows: a window of lines becomes one `write` of `post` requests, then
/// its answers are read, so the round trip is paid once per window rather than once per event.
/// Each request carries its line number as `id`; an answer that is an error is reported with
/// that line, and the other lines are posted all the same.
struct StdinPoster {
    let connection: ControlConnection
    let printSequences: Bool
    static let window = 1024

    /// Posts everything on standard input; returns how many lines failed.
    func run() throws -> Int {
        var failed = 0
        var lineNumber = 0
        var requests: [UInt8] = []
        var pending = 0
        var output = StandardOutput()
        var errors = ""

        func settle() throws {
            guard pending > 0 else { return }
            try connection.send(requests)
            requests.removeAll(keepingCapacity: true)
            for _ in 0..<pending {
                guard let answer = try connection.readJSON() else {
                    throw CommandError("eventbusd closed the connection before answering every post")
                }
                if answer["type"]?.stringValue == "posted", let sequence = answer["seq"]?.intValue {
                    if printSequences { output.append(String(sequence) + "\n") }
                } else {
                    failed += 1
                    errors += "stdin:\(answer["id"]?.intValue ?? 0): \(answer["message"]?.stringValue ?? "not posted")\n"
                }
            }
            pending = 0
            output.flush()
            if !errors.isEmpty { printError(String(errors.dropLast())); errors = "" }
        }

        while let line = readLine(strippingNewline: true) {
            lineNumber += 1
            if line.allSatisfy(\.isWhitespace) { continue }
            switch Self.request(line, id: lineNumber) {
            case .success(let request):
                requests += JSONWriter.line(request)
                pending += 1
                if pending == Self.window { try settle() }
            case .failure(let message):
                failed += 1
                errors += "stdin:\(lineNumber): \(message)\n"
            }
        }
        try settle()
        if !errors.isEmpty { printError(String(errors.dropLast())) }
        return failed
    }

    private enum Parsed { case success(JSON), failure(String) }

    /// `{"name": …, "fields": {…}}` → a `post` request; the host checks the name and fields.
    private static func request(_ line: String, id: Int) -> Parsed {
        let value: JSON
        do { value = try JSON.parse(line) } catch { return .failure("\(error)") }
        guard case .object(let members) = value else { return .failure("a line is a JSON object, found \(value.kindName)") }
        if let unknown = members.keys.sorted().first(where: { $0 != "name" && $0 != "fields" }) {
            return .failure("unknown member \"\(unknown)\": a line has \"name\" and \"fields\"")
        }
        guard let name = members["name"]?.stringValue else { return .failure("\"name\" (a string) is missing") }
        var request: [String: JSON] = ["op": "post", "id": .int(Int64(id)), "name": .string(name)]
        if let fields = members["fields"] { request["fields"] = fields }
        return .success(.object(request))
    }
}
