import EventBusKit

/// Local matching: the bus routes to the connection every signal any of its watches' rules
/// takes (once, however many take it), and the connection's thread asks each watch's match
/// whether it is one of its own — on the match's values, never on a reparsed rule text.
extension DBusMatch {
    /// Whether the header keys hold (all but `sender` and the arguments): the cheap test before
    /// a signal is read.
    func headerMatches(_ header: DBusSignalHeader) -> Bool {
        if let path, header.path != path { return false }
        if let pathNamespace, !Self.path(header.path, isIn: pathNamespace) { return false }
        if let interface, header.interface != interface { return false }
        if let member, header.member != member { return false }
        return true
    }

    /// Whether every key holds for `received`. A well-known `sender` holds when the signal
    /// came from the unique name that owns it (`owner`, from the bus's own answers); a unique
    /// name must be the sender's.
    func matches(_ received: DBusReceivedSignal, owner: (String) -> String?) -> Bool {
        let signal = received.signal
        if let path, signal.path != path { return false }
        if let pathNamespace, !Self.path(signal.path, isIn: pathNamespace) { return false }
        if let interface, signal.interface != interface { return false }
        if let member, signal.member != member { return false }
        for (number, value) in arguments where received.strings[number] != value { return false }
        if let sender {
            let expected = DBusSenderOwners.isUniqueName(sender) ? sender : owner(sender)
            guard let expected, expected == signal.sender else { return false }
        }
        return true
    }

    /// The well-known name whose owner the match needs to know, if any.
    var wellKnownSender: String? {
        guard let sender, !DBusSenderOwners.isUniqueName(sender) else { return nil }
        return sender
    }

    /// `path_namespace`: the path itself or one below it (`/a/b` is in `/a`, `/ab` is not;
    /// everything is in `/`).
    private static func path(_ path: String, isIn namespace: String) -> Bool {
        namespace == "/" || path == namespace || path.hasPrefix(namespace + "/")
    }
}
