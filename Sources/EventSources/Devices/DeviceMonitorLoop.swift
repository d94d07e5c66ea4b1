import CSystemd
import EventBusKit
import Glibc
import SystemCalls

/// The monitor thread's state (see ``DeviceSource``): libsystemd's device monitor on an
/// `sd_event` loop, the tracker of what subscribers were told, and the socket's drop count.
/// Made, run and closed on that thread only.
final class MonitorLoop {
    struct Failure: Error {
        let errorNumber: Int32
        let message: String
    }

    private let watch: DeviceWatch
    let layer: DeviceLayer
    private let source: String
    private let bus: Bus
    private var event: OpaquePointer?
    private var monitor: OpaquePointer?
    private var wakeSource: OpaquePointer?
    /// The monitor's netlink socket (libsystemd's; read here only for its drop count).
    private var socket: Int32 = -1
    private var tracker = DeviceTracker()
    /// The socket's drop count when last read; nil when the kernel does not report it.
    private var dropsSeen: UInt32?
    /// Set by the wake handler; the loop returns to ``DeviceSource`` to look at its flags.
    private var woken = false

    init(watch: DeviceWatch, layer: DeviceLayer, configuration: DeviceSources.Configuration,
         wakeDescriptor: Int32, source: String, bus: Bus) throws(Failure) {
        self.watch = watch
        self.layer = layer
        self.source = source
        self.bus = bus
        func check(_ result: Int32, _ what: String) throws(Failure) {
            guard result >= 0 else { throw Failure(errorNumber: -result, message: "\(what): \(DeviceEnumeration.text(result))") }
        }
        var event: OpaquePointer?
        var monitor: OpaquePointer?
        do throws(Failure) {
            try check(sd_event_new(&event), "cannot make an sd-event loop")
            try check(sd_device_monitor_new(&monitor), "cannot open a device monitor (netlink)")
            if let size = configuration.receiveBufferSize {
                try check(sd_device_monitor_set_receive_buffer_size(monitor, size), "cannot set the monitor's receive buffer to \(size) bytes")
            }
            if let subsystem = watch.subsystem {
                try check(sd_device_monitor_filter_add_match_subsystem_devtype(monitor, subsystem, watch.devtype),
                          "cannot filter subsystem \(subsystem)")
            }
            if let tag = watch.tag {
                try check(sd_device_monitor_filter_add_match_tag(monitor, tag), "cannot filter tag \(tag)")
            }
            try check(sd_device_monitor_attach_event(monitor, event), "cannot attach the device monitor to its loop")
        } catch {
            sd_device_monitor_unref(monitor)
            sd_event_unref(event)
            throw error
        }
        self.event = event
        self.monitor = monitor
        let context = Unmanaged.passUnretained(self).toOpaque()
        do throws(Failure) {
            try check(sd_device_monitor_start(monitor, { _, device, context in
                guard let device, let context else { return 0 }
                Unmanaged<MonitorLoop>.fromOpaque(context).takeUnretainedValue().received(device)
                return 0
            }, context), "cannot start the device monitor")
            // The monitor's event source (and so its socket's descriptor) exists once started.
            socket = sd_event_source_get_io_fd(sd_device_monitor_get_event_source(monitor))
            if layer == .kernel { try joinKernelGroup() }
            var wakeSource: OpaquePointer?
            try check(sd_event_add_io(event, &wakeSource, wakeDescriptor, UInt32(EPOLLIN.rawValue), { _, fd, _, context in
                var count: UInt64 = 0
                _ = try? withUnsafeMutableBytes(of: &count) { try System.read(fd, into: $0) }  // the eventfd's counter (System.WakeUp)
                Unmanaged<MonitorLoop>.fromOpaque(context!).takeUnretainedValue().woken = true
                return 0
            }, context), "cannot watch the wake-up")
            self.wakeSource = wakeSource
        } catch {
            close()
            throw error
        }
        dropsSeen = readDrops()
    }

    /// Linux's netlink groups for uevents: the kernel multicasts on 1, udevd on 2.
    private static let kernelGroup: Int32 = 1
    private static let udevGroup: Int32 = 2
    /// From <linux/netlink.h>, which Swift's Glibc does not import.
    private static let addMembership: Int32 = 1
    private static let dropMembership: Int32 = 2

    /// Moves the started monitor's socket from udev's group to the kernel's (see ``DeviceSource``).
    private func joinKernelGroup() throws(Failure) {
        do { try System.setSocketOption(socket, level: SOL_NETLINK, Self.addMembership, to: Self.kernelGroup) } catch {
            throw Failure(errorNumber: error.errno, message: "cannot join the kernel's uevent group: \(error.reason)")
        }
        do { try System.setSocketOption(socket, level: SOL_NETLINK, Self.dropMembership, to: Self.udevGroup) } catch {
            throw Failure(errorNumber: error.errno, message: "cannot leave udev's group: \(error.reason)")
        }
    }

    func close() {
        wakeSource = sd_event_source_unref(wakeSource)
        if let monitor {
            sd_device_monitor_stop(monitor)
            self.monitor = sd_device_monitor_unref(monitor)
        }
        event = sd_event_unref(event)
    }

    /// Runs the loop until it handled something: a message (posted from ``received(_:)``) or a
    /// wake-up. False when the loop failed (announced with `devices.error`).
    func runOnce() -> Bool {
        woken = false
        let result = sd_event_run(event, UInt64.max)
        guard result >= 0 else {
            post(DeviceNotice(kind: .error, message: "the device monitor's loop failed: \(DeviceEnumeration.text(result))",
                              layer: layer, errorNumber: -result).event(source: source))
            return false
        }
        return true
    }

    // MARK: Posting

    func postStatusAndSnapshot() {
        var events = [DeviceNotice(kind: .status, message: statusMessage, layer: layer).event(source: source)]
        do throws(DeviceEnumeration.Failure) {
            let devices = tracker.start(with: try DeviceEnumeration.list(watch, layer: layer, origin: .snapshot))
            events += devices.map { $0.event(source: source) }
            events.append(snapshotNotice(devices.count))
        } catch {
            events.append(DeviceNotice(kind: .error, message: error.message, layer: layer, errorNumber: error.errorNumber)
                .event(source: source))
        }
        bus.post(contentsOf: events)
    }

    /// What is known, to a subscriber who joined the running source, and the watch's status.
    func postSnapshot(to greeting: SubscriberGreeting) {
        let devices = tracker.current(as: .snapshot)
        greeting.post(contentsOf: [DeviceNotice(kind: .status, message: statusMessage, layer: layer).event(source: source)]
            + devices.map { $0.event(source: source) } + [snapshotNotice(devices.count)])
    }

    private func snapshotNotice(_ count: Int) -> Event {
        DeviceNotice(kind: .snapshot, message: "\(count) devices exist; changes follow", layer: layer, devices: count)
            .event(source: source)
    }

    private var statusMessage: String {
        switch layer {
        case .udev: "following udev's messages (after its rules)"
        case .kernel: "following the kernel's uevents\(watch.layer == .automatic ? " (udevd does not run)" : "")"
        }
    }

    private func received(_ device: OpaquePointer) {
        guard let kind = SDDevice.kind(of: device),
              let change = SDDevice.change(of: device, kind: kind, layer: layer, origin: .event),
              let reported = tracker.apply(change)
        else { return }
        post(reported.event(source: source))
    }

    private func post(_ event: Event) {
        bus.post(event)
    }

    // MARK: Loss

    /// Announces messages the kernel dropped since the last look, and rescans.
    func checkForLoss() {
        guard let seen = dropsSeen, let now = readDrops(), now != seen else { return }
        dropsSeen = now
        let dropped = Int(now &- seen)
        post(DeviceNotice(kind: .gap, message: "the kernel dropped \(dropped) device messages (the monitor's receive buffer was full); listing the devices again",
                          layer: layer, dropped: dropped).event(source: source))
        do throws(DeviceEnumeration.Failure) {
            let (removed, added) = tracker.resync(with: try DeviceEnumeration.list(watch, layer: layer, origin: .rescan))
            var events = (removed + added).map { $0.event(source: source) }
            events.append(DeviceNotice(kind: .rescanned, message: "\(added.count) devices appeared and \(removed.count) went away while messages were lost",
                                       layer: layer, added: added.count, removed: removed.count).event(source: source))
            bus.post(contentsOf: events)
        } catch {
            post(DeviceNotice(kind: .error, message: error.message, layer: layer, errorNumber: error.errorNumber).event(source: source))
        }
    }

    /// The count of messages the kernel dropped for the monitor's socket.
    private func readDrops() -> UInt32? {
        System.droppedMessages(of: socket)
    }
}
