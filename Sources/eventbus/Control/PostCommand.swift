import ArgumentParser
import ControlProtocol

/// `eventbus post NAME [key=value…]`: posts an event on the running host's bus.
struct PostCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "post",
        abstract: "Post an event on the running eventbusd's bus.",
        discussion: """
            Values are typed: integers (42, -7), numbers with a fraction or exponent (1.5, 2e3), \
            true and false; anything else is a string. An integer beyond 64 bits and a key given \
            twice are refused, never rounded or silently dropped. For a string that looks like a \
            number, use --json: `eventbus post app.ready --json '{"build": "1234"}'`. Posting \
            needs root or membership of eventbusd's control.post_group.
            """)

    @Argument(help: ArgumentHelp("The event's name, dot-separated (user.deploy.done).", valueName: "name"))
    var name: String?

    @Argument(help: ArgumentHelp("Fields as key=value.", valueName: "key=value"))
    var fields: [String] = []

    @Option(help: ArgumentHelp("Fields as one JSON object (strings, numbers, booleans), merged with key=value ones.", valueName: "object"))
    var json: String?

    @Flag(name: .customLong("print-seq"), help: "Print the posted event's cursor LIFE:SEQ: the host's life and the event's sequence number (what `tail --since` takes).")
    var printSequence = false

    @Flag(help: ArgumentHelp("Post one event per line of standard input, a JSON object {\"name\": …, \"fields\": {…}}; pipelined over one connection. A line that cannot be posted is reported on standard error with its line number (exit 1); the others are posted."))
    var stdin = false

    @Option(name: .customLong("wait"), help: ArgumentHelp("How long to wait for an eventbusd that is restarting (its socket refuses connections or it refuses posts while shutting down), in seconds; 0: not at all. An event is never posted twice: a post is sent again only when the host said it was not posted.", valueName: "seconds"))
    var wait: Double = 15

    @OptionGroup var socket: SocketOptions

    /// A malformed field is a usage mistake: found while parsing, so the message comes with
    /// `post`'s usage rather than the top level's.
    func validate() throws {
        if stdin {
            guard name == nil, fields.isEmpty, json == nil else { throw ValidationError("--stdin takes the events from standard input: give no name or fields") }
            return
        }
        guard wait >= 0, wait.isFinite else { throw ValidationError("--wait takes a number of seconds (0 or more)") }
        guard name != nil else { throw ValidationError("missing the event's name (or --stdin)") }
        _ = try postedFields()
    }

    func run() throws {
        let patience = Duration.milliseconds(Int64(wait * 1000))
        if stdin {
            let host = try socket.connect(waitingUpTo: patience)
            let failed = try StdinPoster(connection: host.connection, printSequences: printSequence, life: host.hostLife).run()
            if failed > 0 { throw CommandError("\(failed) line(s) of standard input were not posted (see above)") }
            return
        }
        let values = try postedFields()
        let request = ControlRequest(.post(.one(PostedEvent(name: name!, fields: values))))
        let (answer, life) = try HostConnection.waiting(upTo: patience) {
            let host = try socket.connect()
            return (try host.request(request), host.hostLife)
        }
        let posted = try HostConnection.decode(answer, as: "post") { if case .posted(let posted) = $0 { posted } else { nil } }
        if printSequence { print(EventCursor(life: life, sequence: posted.sequence)) }
    }

    private func postedFields() throws -> [String: JSON] {
        var values = try jsonFields()
        for pair in fields {
            guard let equals = pair.firstIndex(of: "="), equals != pair.startIndex else {
                throw ValidationError("a field is key=value, found \"\(pair)\"")
            }
            let key = String(pair[..<equals])
            guard values.updateValue(try Self.typed(String(pair[pair.index(after: equals)...])), forKey: key) == nil else {
                throw ValidationError("the field \"\(key)\" is given twice")
            }
        }
        return values
    }

    private func jsonFields() throws -> [String: JSON] {
        guard let json else { return [:] }
        let parsed: JSON
        do { parsed = try JSON.parse(json) } catch { throw ValidationError("--json: \(error)") }
        guard let object = parsed.objectValue else { throw ValidationError("--json takes an object, found \(parsed.kindName)") }
        return object
    }

    /// `42` → int, `1.5`/`2e3` → double, `true`/`false` → bool, anything else → string.
    /// Digits beyond `Int64` are refused: as a double they would silently change.
    static func typed(_ text: String) throws -> JSON {
        if let number = Int64(text) { return .int(number) }
        let digits = text.first == "-" || text.first == "+" ? text.dropFirst() : Substring(text)
        if !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber) {
            throw ValidationError("\(text) is beyond a 64-bit integer (-9223372036854775808...9223372036854775807); post it as a string with --json")
        }
        if text == "true" { return .bool(true) }
        if text == "false" { return .bool(false) }
        // Only what reads as a JSON number: not "nan", "inf" or "0x1p3", which stay strings.
        if text.contains(where: { $0.isNumber }), text.allSatisfy({ "0123456789+-.eE".contains($0) }),
           let number = Double(text), number.isFinite {
            return .double(number)
        }
        return .string(text)
    }
}
