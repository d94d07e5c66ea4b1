/// Which unique name owns each well-known sender a watch names, so that a watch for
/// `sender=org.freedesktop.login1` takes logind's signals only, even when another watch on the
/// same connection takes the same signal from anybody. (sd-bus's own matching does not know
/// owners: it lets any sender through for a well-known name.)
///
/// For each name the connection adds `NameOwnerChanged` with `arg0=name` to its rules, then
/// asks `GetNameOwner`. The bus handles them in order, so every owner change after the answer
/// comes as a signal; signals that arrive while an answer is outstanding are held, in order,
/// with the owner changes among them, and replayed once every answer is in — the owner a held
/// signal is checked against is the one of its time: before the first held change of a name,
/// that change's old owner, else the answer.
///
/// Owned by the D-Bus connection's thread; every method runs there.
final class DBusSenderOwners {
    private enum Held {
        case signal(DBusReceivedSignal)
        case ownerChange(name: String, old: String, new: String)
    }

    /// Names followed, with their owner (nil: nobody owns it, or not known yet).
    private var owners: [String: String?] = [:]
    private var pending: Set<String> = []
    private var held: [Held] = []

    /// A unique name (`:1.42`) or the bus itself, which is its own sender: nothing to resolve.
    static func isUniqueName(_ name: String) -> Bool {
        name.hasPrefix(":") || name == "org.freedesktop.DBus"
    }

    var names: [String] { Array(owners.keys) }
    var isFollowingAny: Bool { !owners.isEmpty }

    func isFollowing(_ name: String) -> Bool { owners[name] != nil }

    /// The owner of `name` as of the signal being routed now; nil when nobody owns it or it is
    /// not known.
    func owner(of name: String) -> String? { owners[name] ?? nil }

    /// Starts following `name`; the caller then adds its `NameOwnerChanged` rule and asks
    /// `GetNameOwner`, in that order, and hands the answer to ``resolved(_:owner:route:)``.
    func follow(_ name: String) {
        owners[name] = .some(nil)
        pending.insert(name)
    }

    func forget(_ name: String) {
        owners[name] = nil
        pending.remove(name)
    }

    /// A signal a watch may want: routed now, or held while an answer is outstanding.
    func receive(_ signal: DBusReceivedSignal, route: (DBusReceivedSignal) -> Void) {
        if pending.isEmpty { route(signal) } else { held.append(.signal(signal)) }
    }

    /// A `NameOwnerChanged` of a followed name: applied now, or held in its place.
    func ownerChanged(name: String, old: String, new: String) {
        guard owners[name] != nil else { return }
        if pending.isEmpty { owners[name] = .some(new.isEmpty ? nil : new) } else { held.append(.ownerChange(name: name, old: old, new: new)) }
    }

    /// `GetNameOwner`'s answer for `name` (nil: no owner, or the question failed). Replays what
    /// was held once no answer is outstanding.
    func resolved(_ name: String, owner: String?, route: (DBusReceivedSignal) -> Void) {
        guard pending.remove(name) != nil else { return }
        let firstChange = held.lazy.compactMap { item -> String? in
            if case .ownerChange(name, let old, _) = item { return old }
            return nil
        }.first
        let initial = firstChange.map { $0.isEmpty ? nil : $0 } ?? owner
        owners[name] = .some(initial)
        guard pending.isEmpty else { return }
        let replay = held
        held = []
        for item in replay {
            switch item {
            case .signal(let signal): route(signal)
            case .ownerChange(let name, _, let new): if owners[name] != nil { owners[name] = .some(new.isEmpty ? nil : new) }
            }
        }
    }

    /// The connection is gone: what was held is routed with the owners known so far (a
    /// sender-bound watch whose owner was not known yet takes none of it: the gap that follows
    /// covers them), and every owner must be asked again on the next connection.
    func connectionLost(route: (DBusReceivedSignal) -> Void) {
        pending.removeAll()
        let replay = held
        held = []
        for item in replay {
            switch item {
            case .signal(let signal): route(signal)
            case .ownerChange(let name, _, let new): if owners[name] != nil { owners[name] = .some(new.isEmpty ? nil : new) }
            }
        }
        for name in owners.keys { owners[name] = .some(nil) }
    }
}
