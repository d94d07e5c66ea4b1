import EventBusKit

/// Test fixture: follows the devices of its `subsystem` through `context.bus.devices` and posts
/// each change it receives as `result.devices.<id>` (the event's name, the device's sysname and
/// origin), and each notice's name: what the device tests read to see that a module — in the
/// host or in a worker — gets the host's device source, snapshot first.
final class DeviceFollower: EventBusModule {
    let name = "fixture-devices"
    let version = "1.0.0"
    static let configKeys: ModuleConfigKeys = [
        .string("subsystem", default: "net", help: "the subsystem it follows"),
        .string("id", default: "devices", help: "names its posts, result.devices.<id>"),
    ]

    func activate(_ context: ModuleContext) throws {
        let id = try context.config.string("id")
        try context.bus.devices(subsystem: try context.config.string("subsystem"))
            .sink { event in
                var fields: [String: FieldValue] = ["event": .string(event.name)]
                if let device = event.device {
                    fields["sysname"] = .string(device.sysname ?? "")
                    fields["origin"] = .string(device.origin.rawValue)
                }
                context.bus.post("result.devices.\(id)", source: id, fields: fields)
            }
            .store(in: &context.cancellables)
    }

    func deactivate() {}
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(DeviceFollower.init) }
