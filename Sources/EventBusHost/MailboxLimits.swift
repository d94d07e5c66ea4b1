import EventBusKit

/// How much a module's mailbox holds before it drops (and announces) more: events, and their
/// estimated bytes (``Mailbox``). `module_mailbox_capacity` and `module_mailbox_bytes` for every
/// module; a module's own `mailbox_capacity` and `mailbox_bytes` override them. Both bounds,
/// because a count alone lets a stalled module pin ten thousand events of any size.
public struct MailboxLimits: Hashable, Sendable {
    public var events: Int
    public var bytes: Int

    public init(events: Int = 10_000, bytes: Int = Mailbox.defaultByteCapacity) {
        self.events = events
        self.bytes = bytes
    }
}

extension ModuleEntry {
    /// This module's limits: its own where it sets them, else the host's.
    public func mailboxLimits(default host: MailboxLimits) -> MailboxLimits {
        MailboxLimits(events: mailboxCapacity ?? host.events, bytes: mailboxBytes ?? host.bytes)
    }
}
