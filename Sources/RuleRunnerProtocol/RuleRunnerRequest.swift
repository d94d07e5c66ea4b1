import ControlProtocol

/// What a client may ask of the rule runner: run one action of one rule, or stop it. Never a
/// command, a user or a unit property: those come from the root-owned config alone.
public enum RuleRunnerRequest: Sendable, Equatable {
    case run(RuleRunRequest)
    case stop

    /// The request as one line, newline included.
    public var line: [UInt8] {
        switch self {
        case .stop:
            return JSONWriter.line(["op": "stop"])
        case .run(let run):
            return JSONWriter.line(["op": "run", "rule": .string(run.rule), "action": .int(Int64(run.action)),
                                    "run": .string(run.run), "events": .array(run.events)])
        }
    }

    /// Decodes one line (without its newline). Strict: unknown ops and members are refused, so
    /// that nothing a client adds is silently ignored by a root process.
    public static func decode(_ line: UnsafeBufferPointer<UInt8>) -> Result<RuleRunnerRequest, RuleRunnerError> {
        let value: JSON
        do throws(JSONParseError) { value = try JSON.parse(line) } catch {
            return .failure(RuleRunnerError(.badRequest, "not JSON: \(error)"))
        }
        guard case .object(let members) = value else {
            return .failure(RuleRunnerError(.badRequest, "a request is a JSON object, found \(value.kindName)"))
        }
        switch members["op"]?.stringValue {
        case "stop":
            if let unknown = members.keys.sorted().first(where: { $0 != "op" }) {
                return .failure(RuleRunnerError(.badRequest, "unknown member \"\(unknown)\": stop has only \"op\""))
            }
            return .success(.stop)
        case "run":
            return RuleRunRequest.decode(members).map(RuleRunnerRequest.run)
        case let op?:
            return .failure(RuleRunnerError(.badRequest, "unknown op \"\(op)\": the rule runner knows run and stop"))
        case nil:
            return .failure(RuleRunnerError(.badRequest, "a request needs \"op\" (a string: run or stop)"))
        }
    }
}

/// Run action number ``action`` of rule ``rule`` for these events, as run ``run``.
public struct RuleRunRequest: Sendable, Equatable {
    public var rule: String
    /// The action's place in the rule's `then:` list, 1-based.
    public var action: Int
    /// The run's id, part of the unit's name (``RuleRunnerProtocol/isValidRunID(_:)``).
    public var run: String
    /// The triggering events, oldest first, each the object of an `event` line as
    /// `eventbus tail --json` writes it (what the command reads on its standard input).
    public var events: [JSON]

    public init(rule: String, action: Int, run: String, events: [JSON]) {
        self.rule = rule
        self.action = action
        self.run = run
        self.events = events
    }

    static let members: Set<String> = ["op", "rule", "action", "run", "events"]

    static func decode(_ members: [String: JSON]) -> Result<RuleRunRequest, RuleRunnerError> {
        func bad(_ message: String) -> Result<RuleRunRequest, RuleRunnerError> { .failure(RuleRunnerError(.badRequest, message)) }
        if let unknown = members.keys.sorted().first(where: { !Self.members.contains($0) }) {
            return bad("unknown member \"\(unknown)\": run has \"rule\", \"action\", \"run\" and \"events\"")
        }
        guard let rule = members["rule"]?.stringValue, !rule.isEmpty, rule.utf8.count <= 256 else {
            return bad("run needs \"rule\": a rule's name (a string of 1 to 256 bytes)")
        }
        guard let action = members["action"]?.intValue, action >= 1, action <= 10_000 else {
            return bad("run needs \"action\": the action's place in the rule's then: list (an integer from 1)")
        }
        guard let run = members["run"]?.stringValue, RuleRunnerProtocol.isValidRunID(run) else {
            return bad("run needs \"run\": the run's id (1 to 64 letters, digits and dashes)")
        }
        guard let events = members["events"]?.arrayValue, !events.isEmpty, events.count <= RuleRunnerProtocol.maximumEvents else {
            return bad("run needs \"events\": a list of 1 to \(RuleRunnerProtocol.maximumEvents) event objects")
        }
        if let index = events.firstIndex(where: { $0.objectValue == nil }) {
            return bad("events[\(index)] is \(events[index].kindName), not an event object")
        }
        return .success(RuleRunRequest(rule: rule, action: Int(action), run: run, events: events))
    }
}
