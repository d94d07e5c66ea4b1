import SystemdBus

/// What a received signal's header says, before its arguments are read: enough to tell whether
/// any watch could want it, so a signal no watch wants costs no decoding.
struct DBusSignalHeader {
    let sender: String
    let path: String
    let interface: String
    let member: String

    init(reading reader: SDBusMessageReader) {
        sender = reader.sender ?? ""
        path = reader.path ?? ""
        interface = reader.interface ?? ""
        member = reader.member ?? ""
    }

    var isOwnerChange: Bool {
        sender == "org.freedesktop.DBus" && interface == "org.freedesktop.DBus" && member == "NameOwnerChanged"
    }
}
