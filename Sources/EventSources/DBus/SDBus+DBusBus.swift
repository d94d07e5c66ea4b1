import EventBusKit
import SystemdBus

extension SDBus {
    /// A client connection to `bus`: the system or user bus where sd-bus finds them, or the bus
    /// at an address. Fails at once when nothing listens there (no waiting for the socket).
    static func open(_ bus: DBusBus) throws(SDBusError) -> SDBus {
        switch bus {
        case .system: try openSystemBus()
        case .user: try openUserBus()
        case .address(let address): try connect(address: address, busClient: true)
        }
    }
}
