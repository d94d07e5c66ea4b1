import ControlProtocol
import EventBusKit
import RuleActions
import RuleRunnerProtocol

extension HostConfig {
    /// The command that action number `action` (1-based) of rule `rule` runs for the triggering
    /// `events` (objects of `event` lines, as `eventbus tail --json` writes them), as run `run`:
    /// exactly what eventbusd's rule engine builds (``RuleCommand``), from this config's rules.
    ///
    /// Why public: `eventbus-rule-runner` answers a request of eventbusd with it, from the
    /// root-owned config it read itself, so the command, its user and its unit properties are
    /// root's and never eventbusd's (docs/rules-privileges.md). Only the events come from the
    /// client: they fill the templates as any event on the bus would, and each must be one the
    /// rule takes (its patterns and `where:`).
    public func ruleActionCommand(rule: String, action: Int, run: String, events: [JSON]) -> Result<CommandSpec, RuleRunnerError> {
        guard let config = rules.first(where: { $0.name == rule }) else {
            return .failure(RuleRunnerError(.noSuchRule, "no rule \"\(rule)\" in \(file)"))
        }
        guard config.enabled else {
            return .failure(RuleRunnerError(.noSuchRule, "rule \"\(rule)\" (\(config.location)) is disabled"))
        }
        guard config.actions.indices.contains(action - 1), case .run(let runAction) = config.actions[action - 1] else {
            return .failure(RuleRunnerError(.notARunAction,
                "rule \"\(rule)\" (\(config.location)) has no run: action number \(action) (it has \(config.actions.count) action(s))"))
        }
        guard RuleRunnerProtocol.isValidRunID(run) else {
            return .failure(RuleRunnerError(.badRequest, "\"\(run)\" is not a run id"))
        }
        var decoded: [Event] = []
        for (index, event) in events.enumerated() {
            switch EventLineDecoding.event(event) {
            case .failure(let problem): return .failure(RuleRunnerError(.badEvent, "events[\(index)]: \(problem.message)"))
            case .success(let made):
                // Only events the rule itself would take: its `on:`/`all_of:` patterns and its
                // `where:`, so a forged event is at least one the rule's author allowed for.
                guard config.trigger.patterns.contains(where: { $0.matches(made.name) }), config.conditions.accepts(made) else {
                    return .failure(RuleRunnerError(.badEvent, "events[\(index)] (\(made.name)) is not one rule \"\(rule)\" takes (its on: and where:)"))
                }
                decoded.append(made)
            }
        }
        guard !decoded.isEmpty else { return .failure(RuleRunnerError(.badEvent, "a run needs its triggering events")) }
        do throws(RuleCommand.Refusal) {
            return .success(try RuleCommand.spec(for: runAction, rule: rule, index: action, run: run, trigger: RuleTriggerEvents(decoded)))
        } catch {
            return .failure(RuleRunnerError(.refusedCommand, error.reason))
        }
    }
}
