import Foundation
import SystemdBus

/// The one question ``TransientUnitLauncher/connect(address:defaultUser:)`` asks to know that
/// systemd answers at an address: its `Version` (a property anyone may read, which loads no
/// unit). Synchronous, bounded: it runs before any rule does.
enum SystemdVersion {
    static func ask(_ endpoint: TransientUnitLauncher.Endpoint, within limit: Duration = .seconds(10)) -> Result<String, TransientUnitError> {
        let bus: SDBus
        do throws(SDBusError) {
            bus = try SDBus.connect(address: endpoint.address, busClient: endpoint.busClient)
        } catch {
            return .failure(TransientUnitError(.noConnection, "no connection to systemd at \(endpoint.address): \(error)"))
        }
        var answer: Result<String, TransientUnitError>?
        do throws(SDBusError) {
            try bus.call(path: "/org/freedesktop/systemd1", interface: "org.freedesktop.DBus.Properties", member: "Get",
                         arguments: ["org.freedesktop.systemd1.Manager", "Version"]) { reply in
                let reader = SDBusMessageReader(reply)
                if let error = reader.errorName {
                    answer = .failure(TransientUnitError(.noAnswer, "systemd at \(endpoint.address) did not say its version: \(error)"))
                } else if case .some(.some(.string(let version))) = reader.variant() {
                    answer = .success(version)
                } else {
                    answer = .failure(TransientUnitError(.noAnswer, "systemd at \(endpoint.address) answered its version with something else"))
                }
            }
        } catch {
            return .failure(TransientUnitError(.noAnswer, "cannot ask systemd at \(endpoint.address) its version: \(error)"))
        }
        let deadline = ContinuousClock.now + limit
        while answer == nil, ContinuousClock.now < deadline {
            var dispatched: Int32 = 1
            while dispatched > 0, answer == nil { dispatched = bus.process() }
            guard dispatched >= 0, bus.isOpen else {
                return .failure(TransientUnitError(.noAnswer, "the connection to systemd at \(endpoint.address) closed before it answered"))
            }
            if answer == nil {
                var descriptor = pollfd(fd: bus.fileDescriptor, events: Int16(truncatingIfNeeded: bus.events), revents: 0)
                _ = poll(&descriptor, 1, 100)
            }
        }
        return answer ?? .failure(TransientUnitError(.noAnswer, "systemd at \(endpoint.address) did not answer within \(limit)"))
    }
}
