/// The parts of a reload that can fail — each prepared without disturbing what runs — taken
/// together: every part is committed, or, when any part has a problem, every part is abandoned
/// and the host runs exactly as before.
///
/// Why a list of parts rather than one function: each config section that changes what runs
/// (modules, and sections to come) prepares its own change and knows how to commit or undo it;
/// ``BusHost/reload(progress:)`` only adds the parts and finishes. A part is prepared before it
/// is added, so every part's problems are found, not only the first part's.
///
/// Threads: made and finished on the host's control queue.
struct ReloadTransaction {
    private struct Part {
        var problems: [ConfigError]
        var commit: () -> Void
        var abandon: () -> Void
    }

    private var parts: [Part] = []

    /// Adds a prepared part: its problems (`file:line: key: problem`; none: it can be
    /// committed), how to make it take effect, how to leave no trace of it.
    mutating func add(problems: [ConfigError] = [], commit: @escaping () -> Void = {}, abandon: @escaping () -> Void = {}) {
        parts.append(Part(problems: problems, commit: commit, abandon: abandon))
    }

    /// Commits every part in the order added when none has a problem; otherwise abandons every
    /// part, the last added first. Returns the problems, in the order their parts were added.
    func finish() -> [ConfigError] {
        let problems = parts.flatMap(\.problems)
        if problems.isEmpty {
            for part in parts { part.commit() }
        } else {
            for part in parts.reversed() { part.abandon() }
        }
        return problems
    }
}
