import EventBusKit
import Testing

/// The SDK's side of device watches: options, validation, the typed views.
@Suite struct DeviceWatchTests {
    @Test func equalOptionsHaveOneDescription() {
        #expect(DeviceWatch(subsystem: "net").description == DeviceWatch(subsystem: "net", layer: .automatic).description)
        #expect(DeviceWatch(subsystem: "net").description != DeviceWatch(subsystem: "net", layer: .kernel).description)
        #expect(DeviceWatch().description == "subsystem=* devtype=* tag=* layer=automatic")
    }

    @Test func malformedOptionsAreRefusedWithAReason() throws {
        let cases: [(DeviceWatch, String)] = [
            (DeviceWatch(devtype: "disk"), "needs a subsystem"),
            (DeviceWatch(subsystem: ""), "not a device subsystem name"),
            (DeviceWatch(subsystem: "net work"), "not a device subsystem name"),
            (DeviceWatch(subsystem: "block", devtype: "a=b"), "not a device devtype name"),
            (DeviceWatch(tag: "systemd", layer: .kernel), "needs the udev layer"),
        ]
        for (watch, reason) in cases {
            let error = #expect(throws: EventBusError.self) { try watch.validate() }
            #expect(error?.code == .invalidDeviceWatch)
            #expect(error?.message.contains(reason) == true, "\(watch): \(error?.message ?? "")")
        }
        try DeviceWatch(subsystem: "usb", devtype: "usb_device", tag: "seat").validate()
    }

    @Test func aBusWithoutTheHostsDriverSaysSo() {
        let error = #expect(throws: EventBusError.self) { try Bus().devices(subsystem: "net") }
        #expect(error?.code == .sourceUnavailable)
        let invalid = #expect(throws: EventBusError.self) { try Bus().devices(devtype: "disk") }
        #expect(invalid?.code == .invalidDeviceWatch)
    }

    @Test func aChangeReadsBackFromItsEvent() {
        let change = DeviceChange(kind: .moved, syspath: "/sys/devices/virtual/net/eth1", oldSyspath: "/sys/devices/virtual/net/veth0",
                                  subsystem: "net", devtype: nil, devnode: nil, sysname: "eth1", driver: nil, action: "move",
                                  seqnum: 4242, ifindex: 7, layer: .kernel, origin: .event,
                                  properties: ["INTERFACE": "eth1", "IFINDEX": "7"])
        let event = change.event(source: "devices:x")
        #expect(event.name == "device.moved")
        #expect(event["prop.INTERFACE"] == "eth1")
        #expect(event["seqnum"] == .int(4242))
        #expect(event["from"] == "kernel")
        #expect(event.device == change)
        #expect(Event(name: "device.exploded", fields: ["syspath": "/x", "from": "udev"]).device == nil)
    }

    @Test func everyKernelActionHasAnEvent() {
        let actions = ["add", "remove", "change", "move", "bind", "unbind", "online", "offline"]
        #expect(Set(actions.compactMap(DeviceChange.Kind.init(action:))) == Set(DeviceChange.Kind.allCases))
        #expect(DeviceChange.Kind(action: "explode") == nil)
    }

    @Test func aNoticeReadsBackFromItsEvent() {
        let notice = DeviceNotice(kind: .gap, message: "dropped", layer: .udev, dropped: 12)
        #expect(notice.event(source: "devices:x").deviceNotice == notice)
        #expect(notice.event(source: "devices:x").name == "devices.gap")
    }
}
