import Logging

/// A reload's change to the modules, prepared while the running modules keep running, then
/// committed or abandoned as a whole.
///
/// Why: a reload that refused one module's section, or whose new instance of a module failed to
/// activate, used to leave the other modules changed and that module stopped — and answered
/// success. Preparing does everything that can fail: new and changed modules are activated as
/// new instances *beside* the running ones (for that moment both receive events), sections are
/// checked and handed to the modules that take them in place. Committing retires what the new
/// instances replace and stops what the config removed; abandoning deactivates the new
/// instances and gives modules that took a section in place their previous one back, so the
/// host runs as before the reload.
///
/// A new instance gets a slot of its own: its mailbox (with the config's limits: a restarted
/// module takes new mailbox limits at once), its worker, its counts from zero.
struct ModuleReload {
    /// Every problem, `file:line: key: problem`, in the order met; none: it can be committed.
    fileprivate(set) var problems: [ConfigError] = []
    fileprivate let desired: [ModuleEntry]
    fileprivate let defaultMailbox: MailboxLimits
    /// Activated new instances, each to take its module's place.
    fileprivate var replacements: [ModuleSlot] = []
    /// Running modules that took their new section in place, with the entries before and after.
    fileprivate var reconfigured: [(slot: ModuleSlot, previous: ModuleEntry, new: ModuleEntry)] = []
    fileprivate var stops: [(name: String, removed: Bool)] = []
    /// What only a host restart applies, said when the reload is committed.
    fileprivate var restartNotices: [ModuleAction] = []
    /// Why a module's section in the file is not the one it runs, for `eventbus modules` after
    /// an abandoned reload.
    fileprivate var refusedSections: [String: String] = [:]
}

extension ModuleHost {
    /// Prepares bringing the modules in line with `modules`, the new config's list (see
    /// ``ModuleReload``). Runs on the host's control queue; `progress` hears of each call into a
    /// module before it is made.
    func prepare(_ modules: [ModuleEntry], defaultMailbox: MailboxLimits,
                 progress: (HostProgress) -> Void) -> ModuleReload {
        var reload = ModuleReload(desired: modules, defaultMailbox: defaultMailbox)
        let desired = Dictionary(uniqueKeysWithValues: modules.map { ($0.name, $0) })
        var inPlace: [(ModuleSlot, ModuleEntry)] = []
        for action in ModulePlan.actions(current: current, desired: modules, defaultMailbox: defaultMailbox) {
            switch action {
            case .stop(let name, let removed):
                reload.stops.append((name, removed))
            case .start(let name):
                activateReplacement(desired[name]!, into: &reload, progress: progress)
            case .restart(let name, let reason):
                log(for: name).info("module \(name) restarts: \(reason)")
                activateReplacement(desired[name]!, into: &reload, progress: progress)
            case .reconfigure(let name):
                inPlace.append((slot(name)!, desired[name]!))
            case .restartNeededForPath, .restartNeededForFile, .restartNeededForCapacity:
                reload.restartNotices.append(action)
            }
        }
        for (slot, entry) in inPlace {
            prepareReconfiguration(slot, to: entry, into: &reload, progress: progress)
        }
        return reload
    }

    /// A new instance of the module `entry` names, activated in a slot of its own; kept to take
    /// the running one's place, or its problems recorded.
    private func activateReplacement(_ entry: ModuleEntry, into reload: inout ModuleReload,
                                     progress: (HostProgress) -> Void) {
        let candidate = ModuleSlot(entry: entry, mailbox: entry.mailboxLimits(default: reload.defaultMailbox))
        // Code loaded into eventbusd stays: the new instance runs the file the old one was
        // loaded from, and a later reload must still see that it was replaced since.
        if entry.isolation == .none, let running = slot(entry.name) { candidate.activatedFile = running.activatedFile }
        let problems = activate(candidate, entry: entry, progress: progress)
        if problems.isEmpty {
            reload.replacements.append(candidate)
        } else {
            reload.problems += problems
            if case .failed(let reason) = candidate.status { reload.refusedSections[entry.name] = reason }
        }
    }

    /// Hands the running module its new section: taken in place (to be given back if the reload
    /// is abandoned), or taken by a new instance, or refused.
    private func prepareReconfiguration(_ slot: ModuleSlot, to entry: ModuleEntry, into reload: inout ModuleReload,
                                        progress: (HostProgress) -> Void) {
        func problem(_ message: String) -> ConfigError {
            ConfigError(file: entry.configLocations.file, line: entry.configLocations.sectionLine,
                        key: entry.configLocations.key, message: message)
        }
        switch reconfigure(slot, with: entry, progress: progress) {
        case .result(.applied)?:
            reload.reconfigured.append((slot, slot.entry, entry))
        case .result(.reactivate)?:
            log(for: slot.name).info("module \(slot.name) restarts with its new config")
            var updated = entry
            updated.path = slot.entry.path  // a changed path needs a process restart
            activateReplacement(updated, into: &reload, progress: progress)
        case .threw(let message)?:
            log(for: slot.name).error("module \(slot.name) rejected its new config: \(message)")
            reload.problems.append(problem("the module rejected it: \(message)"))
            reload.refusedSections[slot.name] = "the module rejected it: \(message)"
        case .refused(let refusal)?:
            for problem in refusal.problems { log(for: slot.name).error("\(problem)") }
            log(for: slot.name).error("module \(slot.name)'s new section is refused (\(refusal.validKeys))")
            reload.problems += refusal.problems
            reload.refusedSections[slot.name] = refusal.summary
        case nil:
            let message = "reconfigure did not return within \(callTimeout)"
            log(for: slot.name).error("module \(slot.name): \(message)")
            reload.problems.append(problem(message))
            reload.refusedSections[slot.name] = message
        }
    }

    /// Makes a prepared reload without problems take effect: removed and disabled modules stop,
    /// new instances take the place of the ones they replace (which are retired), sections taken
    /// in place are recorded, and no module is marked as running an older section any more.
    func commit(_ reload: ModuleReload, progress: (HostProgress) -> Void) {
        precondition(reload.problems.isEmpty, "a reload with problems is abandoned, not committed")
        for (name, removed) in reload.stops {
            guard let slot = slot(name) else { continue }
            deactivate(slot, reason: removed ? "removed from the config" : "disabled in the config", becoming: .disabled,
                       progress: progress)
            if removed {
                remove(slot)
            } else {
                slot.entry = reload.desired.first { $0.name == name }!
                slot.status = .disabled
            }
        }
        for candidate in reload.replacements {
            if let old = slot(candidate.name) {
                deactivate(old, reason: "replaced by its new instance", becoming: .stopped, progress: progress)
            }
            install(candidate)
        }
        for (slot, _, new) in reload.reconfigured {
            var updated = slot.entry
            updated.config = new.config
            slot.entry = updated
            log(for: slot.name).info("module \(slot.name) applied its new config")
        }
        let replaced = Set(reload.replacements.map(\.name))
        for notice in reload.restartNotices {
            // A new instance has a new mailbox, with the new limits.
            if case .restartNeededForCapacity(let name) = notice, replaced.contains(name) { continue }
            logRestartNotice(notice, in: reload.desired)
        }
        // Disabled modules are listed too, so status shows them.
        for entry in reload.desired where !entry.enabled && slot(entry.name) == nil {
            _ = makeSlot(entry, mailbox: entry.mailboxLimits(default: reload.defaultMailbox))
        }
        sort(as: reload.desired)
        // Every module now runs what the file says: a section refused before is no longer there.
        for slot in allSlots { slot.configNotApplied = nil }
    }

    /// Undoes a prepared reload: sections taken in place are given back (newest first), new
    /// instances deactivated; modules whose new section was the trouble are marked as running
    /// their previous one.
    func abandon(_ reload: ModuleReload, progress: (HostProgress) -> Void) {
        for (slot, previous, new) in reload.reconfigured.reversed() {
            if case .result(.applied)? = reconfigure(slot, with: previous, progress: progress) { continue }
            // It keeps the new section: record that, so the next reload compares with the truth.
            log(for: slot.name).error("module \(slot.name) took its new section and did not take its previous one back; it runs with the new one")
            var updated = slot.entry
            updated.config = new.config
            slot.entry = updated
        }
        for candidate in reload.replacements {
            deactivate(candidate, reason: "the reload was refused", becoming: .stopped, progress: progress)
        }
        for (name, reason) in reload.refusedSections {
            slot(name)?.configNotApplied = reason
        }
    }

    private func logRestartNotice(_ notice: ModuleAction, in desired: [ModuleEntry]) {
        func location(_ name: String) -> String { desired.first { $0.name == name }?.location ?? name }
        switch notice {
        case .restartNeededForPath(let name, let running, let configured):
            log(for: name).warning("\(location(name)): modules.\(name).path changed from \(running) to \(configured); loaded code cannot be unloaded, so \(name) keeps running the old file until eventbusd restarts")
        case .restartNeededForFile(let name, let path):
            log(for: name).warning("\(location(name)): modules.\(name): \(path) was replaced since it was loaded; code loaded into eventbusd cannot be unloaded, so \(name) keeps running the old code until eventbusd restarts (with isolation: process, a reload starts a worker with the new file)")
        case .restartNeededForCapacity(let name):
            log(for: name).notice("modules.\(name): the new mailbox limits apply when eventbusd restarts")
        case .start, .stop, .reconfigure, .restart:
            break
        }
    }
}
