import EventBusKit
import Foundation
import SystemdBus
import SystemCalls

extension SDBus {
    /// Where a unit watch of `manager` connects: the private socket when it is there and
    /// usable (root, for the system manager), else the bus.
    static func connect(to manager: UnitManager) throws(SDBusError) -> SDBus {
        switch manager {
        case .system:
            let privateSocket = "/run/systemd/private"
            if geteuid() == 0, System.isAccessible(privateSocket) {
                return try connect(address: "unix:path=\(privateSocket)", busClient: false)
            }
            return try openSystemBus()
        case .user:
            if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"],
               System.isAccessible(runtime + "/systemd/private") {
                return try connect(address: "unix:path=\(runtime)/systemd/private", busClient: false)
            }
            return try openUserBus()
        case .address(let address):
            return try connect(address: address, busClient: !address.hasSuffix("/systemd/private"))
        }
    }
}
