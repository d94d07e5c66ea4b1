/// What a reload does to the modules: the difference between the modules as they run and as the
/// new config lists them. Pure, so every rule can be tested without loading anything.
enum ModuleAction: Equatable {
    /// Load and activate: newly listed, re-enabled, or refused before (a reload retries it).
    case start(name: String)
    /// Deactivate and drop: no longer listed (`removed`) or `enabled: false`.
    case stop(name: String, removed: Bool)
    /// Running, and its `config:` section changed: ask the module (``EventBusModule/reconfigure(_:context:)``).
    case reconfigure(name: String)
    /// Running, and its `path` changed: loaded code cannot be unloaded, so the old code keeps
    /// running until the host restarts.
    case restartNeededForPath(name: String, running: String, configured: String)
    /// Running in eventbusd, and its file was replaced since it was loaded (a rebuilt module):
    /// loaded code cannot be unloaded, so the old code keeps running until the host restarts.
    case restartNeededForFile(name: String, path: String)
    /// Running, and its mailbox capacity changed: a mailbox's bound is fixed, so the new one
    /// applies when the module is next started.
    case restartNeededForCapacity(name: String)
    /// Running, and its isolation or worker settings changed — or it runs in a worker and its
    /// path changed or its file was replaced (a new worker loads the new file), or it is an exec
    /// module whose `exec:`, `subscribe:` or `posts_per_second` changed: deactivate it and start
    /// it again.
    case restart(name: String, reason: String)
}

enum ModulePlan {
    /// What runs now, per module name.
    struct Current {
        var entry: ModuleEntry
        var isActive: Bool
        var mailbox: MailboxLimits
        /// The file at the module's path is not the one it was activated from.
        var fileChanged = false
    }

    /// The actions: stops, then changes, then starts, each group in config order. A reload
    /// (``ModuleReload``) activates the new instances first and stops what the config removed
    /// only when every part of it succeeded.
    static func actions(current: [String: Current], desired: [ModuleEntry], defaultMailbox: MailboxLimits) -> [ModuleAction] {
        var stops: [ModuleAction] = []
        var changes: [ModuleAction] = []
        var starts: [ModuleAction] = []
        let desiredNames = Set(desired.map(\.name))
        for name in current.keys.sorted() where !desiredNames.contains(name) {
            stops.append(.stop(name: name, removed: true))
        }
        for entry in desired {
            guard let now = current[entry.name] else {
                if entry.enabled { starts.append(.start(name: entry.name)) }
                continue
            }
            guard entry.enabled else {
                if now.entry.enabled || now.isActive { stops.append(.stop(name: entry.name, removed: false)) }
                continue
            }
            guard now.isActive else {
                starts.append(.start(name: entry.name))
                continue
            }
            if now.entry.isolation != entry.isolation {
                changes.append(.restart(name: entry.name, reason: "isolation changed from \(now.entry.isolation.rawValue) to \(entry.isolation.rawValue)"))
                continue
            }
            let replaced = now.entry.path == entry.path && now.fileChanged
            // An exec module's program, arguments or subscriptions: a new program is started.
            let execChanged = now.entry.exec != entry.exec
            if entry.isolation == .process && (now.entry.path != entry.path || now.entry.worker != entry.worker || replaced || execChanged) {
                changes.append(.restart(name: entry.name, reason: now.entry.path != entry.path
                    ? "path changed from \(now.entry.path) to \(entry.path)"
                    : replaced ? "its file \(entry.path) was replaced since it was loaded"
                    : execChanged ? "exec settings changed" : "worker settings changed"))
                if entry.mailboxLimits(default: defaultMailbox) != now.mailbox {
                    changes.append(.restartNeededForCapacity(name: entry.name))
                }
                continue
            }
            if now.entry.path != entry.path {
                changes.append(.restartNeededForPath(name: entry.name, running: now.entry.path, configured: entry.path))
            } else if replaced {
                changes.append(.restartNeededForFile(name: entry.name, path: entry.path))
            }
            if entry.mailboxLimits(default: defaultMailbox) != now.mailbox {
                changes.append(.restartNeededForCapacity(name: entry.name))
            }
            if now.entry.config != entry.config {
                changes.append(.reconfigure(name: entry.name))
            }
        }
        return stops + changes + starts
    }
}
