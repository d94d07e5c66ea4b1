/// Which message bus a D-Bus watch listens on.
///
/// Every watch of one bus shares the host's one connection to it: one socket, one thread, one
/// `AddMatch` per distinct match rule.
public enum DBusBus: Sendable, Hashable, CustomStringConvertible {
    /// The system bus (dbus-daemon or dbus-broker), at `$DBUS_SYSTEM_BUS_ADDRESS` or
    /// `unix:path=/run/dbus/system_bus_socket`: logind, NetworkManager, systemd, udisks…
    case system
    /// The calling user's session bus, at `$DBUS_SESSION_BUS_ADDRESS` or `$XDG_RUNTIME_DIR/bus`.
    case user
    /// A message bus at this D-Bus address (`unix:path=/run/some/bus`): a private dbus-daemon,
    /// a container's system bus seen from outside. Always spoken to as a bus (Hello, AddMatch).
    case address(String)

    /// `system`, `user`, or `address:` and the address: the bus part of a watch's source id.
    public var description: String {
        switch self {
        case .system: "system"
        case .user: "user"
        case .address(let address): "address:\(address)"
        }
    }

    /// How config and the CLI spell it: `system`, `user`, or the address itself (`unix:path=…`).
    public var configText: String {
        switch self {
        case .system: "system"
        case .user: "user"
        case .address(let address): address
        }
    }

    /// Reads ``configText``: `system`, `user` (or `session`, as D-Bus calls it), or an address
    /// (a transport and its keys). Throws ``EventBusError/Code/invalidDBusWatch`` for anything else, saying
    /// what is expected.
    public init(parsing text: String) throws {
        switch text {
        case "system": self = .system
        case "user", "session": self = .user
        default:
            let bus = DBusBus.address(text)
            try bus.validate()
            self = bus
        }
    }

    /// Throws ``EventBusError/Code/invalidDBusWatch`` for an address without a transport
    /// (`unix:`, `tcp:`…): sd-bus would refuse it only when the connection is tried, and a
    /// typo would read as an outage.
    public func validate() throws {
        guard case .address(let address) = self else { return }
        guard let colon = address.firstIndex(of: ":"), colon != address.startIndex,
              address[..<colon].allSatisfy({ $0.isLetter || $0 == "-" }) else {
            throw EventBusError(.invalidDBusWatch,
                "\"\(address)\" is not a D-Bus address: expected system, user, or a transport and its keys (unix:path=/run/dbus/system_bus_socket)")
        }
    }
}

extension DBusBus: Codable {
    /// One string, as config spells it (``configText``): module workers forward watches to the
    /// host in this form.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        self = try DBusBus(parsing: text)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(configText)
    }
}
