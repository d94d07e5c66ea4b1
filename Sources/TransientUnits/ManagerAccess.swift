import Foundation
import SystemdBus

/// What ``TransientUnitLauncher/connect(address:defaultUser:)`` asks before it says systemd can
/// run units for this process: that systemd answers at the address (its `Version`, a property
/// anyone may read, which loads no unit) and, for a caller that is not root on the bus, whether
/// polkit lets it manage units without asking anyone (`CheckAuthorization` of
/// `org.freedesktop.systemd1.manage-units`, not interactive — the question systemd itself asks
/// polkit at each `StartTransientUnit`). Synchronous and bounded: it runs before any rule does.
enum ManagerAccess {
    static let manageUnits = "org.freedesktop.systemd1.manage-units"

    static func check(_ endpoint: TransientUnitLauncher.Endpoint, within limit: Duration = .seconds(10)) -> Result<Void, TransientUnitError> {
        let bus: SDBus
        do throws(SDBusError) {
            bus = try SDBus.connect(address: endpoint.address, busClient: endpoint.busClient)
        } catch {
            return .failure(TransientUnitError(.noConnection, "no connection to systemd at \(endpoint.address): \(error)"))
        }
        var version: Result<Void, TransientUnitError>?
        let asked = send(bus, endpoint, "ask systemd its version") { (bus) throws(SDBusError) in
            try bus.call(path: "/org/freedesktop/systemd1", interface: "org.freedesktop.DBus.Properties", member: "Get",
                         arguments: ["org.freedesktop.systemd1.Manager", "Version"]) { reply in
                let reader = SDBusMessageReader(reply)
                if let error = reader.errorName {
                    version = .failure(TransientUnitError(.noAnswer, "systemd at \(endpoint.address) did not say its version: \(error)"))
                } else if case .some(.some(.string)) = reader.variant() {
                    version = .success(())
                } else {
                    version = .failure(TransientUnitError(.noAnswer, "systemd at \(endpoint.address) answered its version with something else"))
                }
            }
        }
        if case .failure(let error) = asked { return .failure(error) }
        if case .failure(let error) = wait(bus, endpoint, limit, until: { version != nil }) { return .failure(error) }
        if case .failure(let error) = version! { return .failure(error) }
        // Root is let through without polkit (systemd checks CAP_SYS_ADMIN first); so is anyone
        // on the private socket, which only root may open.
        guard endpoint.busClient, geteuid() != 0 else { return .success(()) }
        return authorization(bus, endpoint, limit)
    }

    /// polkit's answer for this connection (its unique name is the subject systemd names too).
    private static func authorization(_ bus: SDBus, _ endpoint: TransientUnitLauncher.Endpoint, _ limit: Duration) -> Result<Void, TransientUnitError> {
        guard let name = bus.uniqueName else {
            return .failure(TransientUnitError(.noAnswer, "no unique name on the bus at \(endpoint.address) to ask polkit about"))
        }
        var answer: Result<Void, TransientUnitError>?
        let refusal = "systemd at \(endpoint.address) would refuse uid \(geteuid()) its transient units"
        let asked = send(bus, endpoint, "ask polkit") { (bus) throws(SDBusError) in
            try bus.call(path: "/org/freedesktop/PolicyKit1/Authority", interface: "org.freedesktop.PolicyKit1.Authority",
                         member: "CheckAuthorization", destination: "org.freedesktop.PolicyKit1", body: { (writer) throws(SDBusError) in
                // subject (sa{sv}): this connection; the action; no details; flags 0: never
                // interactive; no cancellation id.
                try writer.container("r", "sa{sv}") { () throws(SDBusError) in
                    try writer.string("system-bus-name")
                    try writer.container("a", "{sv}") { () throws(SDBusError) in
                        try writer.container("e", "sv") { () throws(SDBusError) in
                            try writer.string("name")
                            try writer.variant(.string(name))
                        }
                    }
                }
                try writer.string(manageUnits)
                try writer.container("a", "{ss}") { () throws(SDBusError) in }
                try writer.uint32(0)
                try writer.string("")
            }, reply: { reply in
                let reader = SDBusMessageReader(reply)
                if let error = reader.errorName {
                    // No polkit on the bus: systemd then refuses everyone but root.
                    answer = .failure(TransientUnitError(.notAllowed, "\(refusal): polkit did not answer (\(error))"))
                } else if reader.enter("r", "bba{ss}"), let authorized = reader.bool() {
                    answer = authorized ? .success(())
                        : .failure(TransientUnitError(.notAllowed, "\(refusal): polkit does not allow it \(manageUnits) (docs/rules-privileges.md)"))
                } else {
                    answer = .failure(TransientUnitError(.noAnswer, "polkit answered \(manageUnits) with something else"))
                }
            })
        }
        if case .failure(let error) = asked { return .failure(error) }
        if case .failure(let error) = wait(bus, endpoint, limit, until: { answer != nil }) { return .failure(error) }
        return answer!
    }

    private static func send(_ bus: SDBus, _ endpoint: TransientUnitLauncher.Endpoint, _ doing: String,
                             _ call: (SDBus) throws(SDBusError) -> Void) -> Result<Void, TransientUnitError> {
        do throws(SDBusError) {
            try call(bus)
            return .success(())
        } catch {
            return .failure(TransientUnitError(.noAnswer, "cannot \(doing) at \(endpoint.address): \(error)"))
        }
    }

    private static func wait(_ bus: SDBus, _ endpoint: TransientUnitLauncher.Endpoint, _ limit: Duration,
                             until answered: () -> Bool) -> Result<Void, TransientUnitError> {
        bus.wait(until: answered, within: limit) ? .success(())
            : .failure(TransientUnitError(.noAnswer, "no answer at \(endpoint.address) within \(limit), or the connection closed"))
    }
}
