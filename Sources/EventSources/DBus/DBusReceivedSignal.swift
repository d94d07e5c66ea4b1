import EventBusKit
import SystemdBus

/// One signal as the D-Bus connection's thread read it from a message: the ``DBusSignal`` its
/// events are made from, what local matching needs besides (the string arguments), and when it
/// was read.
struct DBusReceivedSignal {
    let signal: DBusSignal
    /// Top-level `s` arguments by position, for `argN` keys.
    let strings: [Int: String]
    /// `CLOCK_MONOTONIC` when it was read: its events' monotonic time.
    let receivedAt: UInt64

    /// Reads the message `reader` holds (a signal), header and every argument.
    init(reading reader: SDBusMessageReader) {
        receivedAt = MonotonicClock.now()
        let arguments = DBusArguments(reading: reader)
        strings = arguments.strings
        signal = DBusSignal(sender: reader.sender ?? "", path: reader.path ?? "", interface: reader.interface ?? "",
                            member: reader.member ?? "", signature: reader.signature,
                            arguments: arguments.fields, unrepresented: arguments.unrepresented)
    }

    /// `NameOwnerChanged(name, old, new)` from the bus itself: what the sender tracking follows.
    var ownerChange: (name: String, old: String, new: String)? {
        guard signal.sender == "org.freedesktop.DBus", signal.interface == "org.freedesktop.DBus",
              signal.member == "NameOwnerChanged", let name = strings[0], let old = strings[1], let new = strings[2] else { return nil }
        return (name, old, new)
    }
}
