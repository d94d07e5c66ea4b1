import CSystemd
import EventBusKit
import Foundation

/// One sd-bus connection to a service manager. sd-bus objects are not thread-safe: every
/// method here runs on the owning ``UnitsConnection``'s thread.
final class SDBus {
    let bus: OpaquePointer
    /// Whether this is a client of a message bus (dbus-daemon) — which routes by name, needs
    /// `AddMatch` and stamps senders — rather than a private socket to systemd itself.
    let isBusClient: Bool

    /// Where a unit watch of `manager` connects: the private socket when it is there and
    /// usable (root, for the system manager), else the bus.
    static func connect(to manager: UnitManager) throws(SDBusError) -> SDBus {
        var bus: OpaquePointer?
        switch manager {
        case .system:
            let privateSocket = "/run/systemd/private"
            if geteuid() == 0, access(privateSocket, F_OK) == 0 {
                return try connect(address: "unix:path=\(privateSocket)", busClient: false)
            }
            try SDBusError.check(sd_bus_open_system(&bus), "connect to the system bus")
        case .user:
            if let runtime = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"],
               access(runtime + "/systemd/private", F_OK) == 0 {
                return try connect(address: "unix:path=\(runtime)/systemd/private", busClient: false)
            }
            try SDBusError.check(sd_bus_open_user(&bus), "connect to the user bus")
        case .address(let address):
            return try connect(address: address, busClient: !address.hasSuffix("/systemd/private"))
        }
        return SDBus(bus: bus!, isBusClient: true)
    }

    private static func connect(address: String, busClient: Bool) throws(SDBusError) -> SDBus {
        var bus: OpaquePointer?
        try SDBusError.check(sd_bus_new(&bus), "make a bus connection")
        let connection = SDBus(bus: bus!, isBusClient: busClient)
        try SDBusError.check(sd_bus_set_address(bus, address), "use the address \(address)")
        try SDBusError.check(sd_bus_set_bus_client(bus, busClient ? 1 : 0), "set up \(address)")
        try SDBusError.check(sd_bus_start(bus), "connect to \(address)")
        return connection
    }

    private init(bus: OpaquePointer, isBusClient: Bool) {
        self.bus = bus
        self.isBusClient = isBusClient
    }

    deinit {
        // Frees the floating slots too, which releases their callbacks.
        sd_bus_flush_close_unref(bus)
    }

    /// systemd's bus name, for calls: none on a private socket (nothing routes there).
    var destination: String? { isBusClient ? "org.freedesktop.systemd1" : nil }

    var fileDescriptor: Int32 { sd_bus_get_fd(bus) }
    var events: Int32 { sd_bus_get_events(bus) }
    var isOpen: Bool { sd_bus_is_open(bus) > 0 }

    /// When sd-bus wants to be called again without I/O (a call's timeout), in milliseconds from
    /// now for poll(2); -1 for never.
    var pollTimeout: Int32 {
        var deadline: UInt64 = 0
        guard sd_bus_get_timeout(bus, &deadline) >= 0, deadline != UInt64.max else { return -1 }
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nowMicroseconds = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
        guard deadline > nowMicroseconds else { return 0 }
        return Int32(clamping: (deadline - nowMicroseconds + 999) / 1000)
    }

    /// Dispatches what is readable, one message per call; > 0 while there may be more. Negative
    /// when the connection failed.
    func process() -> Int32 { sd_bus_process(bus, nil) }

    /// Calls `handler` with every message that matches `rule` (D-Bus match syntax) from now on,
    /// until the connection closes.
    func addMatch(_ rule: String, _ handler: @escaping (OpaquePointer) -> Void) throws(SDBusError) {
        let box = Unmanaged.passRetained(MessageHandler(handler))
        var slot: OpaquePointer?
        let result = sd_bus_add_match(bus, &slot, rule, SDBus.dispatch, box.toOpaque())
        guard result >= 0 else {
            box.release()
            throw SDBusError(code: result, doing: "add the match \(rule)")
        }
        keep(slot!)
    }

    /// Sends a method call; `reply` gets the reply — or the error sd-bus makes up when the
    /// connection closes first — on this connection's thread, in arrival order with signals.
    func call(path: String, interface: String, member: String, arguments: [String] = [], uint32Arguments: [UInt32] = [],
              reply: @escaping (OpaquePointer) -> Void) throws(SDBusError) {
        var message: OpaquePointer?
        try SDBusError.check(sd_bus_message_new_method_call(bus, &message, destination, path, interface, member),
                             "make a \(member) call")
        defer { sd_bus_message_unref(message) }
        for argument in arguments {
            try SDBusError.check(argument.withCString { sd_bus_message_append_basic(message, Int8(UInt8(ascii: "s")), $0) },
                                 "append to \(member)")
        }
        for var argument in uint32Arguments {
            try SDBusError.check(sd_bus_message_append_basic(message, Int8(UInt8(ascii: "u")), &argument), "append to \(member)")
        }
        let box = Unmanaged.passRetained(MessageHandler(reply))
        var slot: OpaquePointer?
        let result = sd_bus_call_async(bus, &slot, message, SDBus.dispatch, box.toOpaque(), 0)
        guard result >= 0 else {
            box.release()
            throw SDBusError(code: result, doing: "send \(member)")
        }
        keep(slot!)
    }

    /// Hands the slot to the bus (floating): freed with the match or call it belongs to, or
    /// with the bus; its destroy callback then releases the handler.
    private func keep(_ slot: OpaquePointer) {
        sd_bus_slot_set_destroy_callback(slot) { userdata in
            Unmanaged<MessageHandler>.fromOpaque(userdata!).release()
        }
        sd_bus_slot_set_floating(slot, 1)
        sd_bus_slot_unref(slot)
    }

    private static let dispatch: sd_bus_message_handler_t = { message, userdata, _ in
        Unmanaged<MessageHandler>.fromOpaque(userdata!).takeUnretainedValue().body(message!)
        return 0
    }
}

private final class MessageHandler {
    let body: (OpaquePointer) -> Void
    init(_ body: @escaping (OpaquePointer) -> Void) { self.body = body }
}

/// A failed sd-bus call, with what was being done.
struct SDBusError: Error, CustomStringConvertible {
    let code: Int32
    let doing: String

    static func check(_ result: Int32, _ doing: @autoclosure () -> String) throws(SDBusError) {
        if result < 0 { throw SDBusError(code: result, doing: doing()) }
    }

    var description: String { "cannot \(doing): \(String(cString: strerror(-code)))" }
}
