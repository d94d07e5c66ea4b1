/// Which rule action a command is: the rule's name, the action's place in its `then:` list
/// (1-based, as `action.*` records count) and the run's id.
///
/// Why a launcher needs it: the rule runner (`eventbus-rule-runner`, docs/rules-privileges.md)
/// never takes a command from eventbusd — it is told only which action of which rule to run,
/// and builds the command itself from the root-owned config.
public struct CommandOrigin: Sendable, Equatable {
    public var rule: String
    public var action: Int
    public var run: String

    public init(rule: String, action: Int, run: String) {
        self.rule = rule
        self.action = action
        self.run = run
    }
}
