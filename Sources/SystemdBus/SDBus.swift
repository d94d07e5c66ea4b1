import CSystemd
import Foundation
import SystemCalls

/// One sd-bus connection to a service manager. sd-bus objects are not thread-safe: every
/// method here runs on the one thread that owns the connection (the units source's connection
/// thread, a transient unit's run thread).
public final class SDBus {
    let bus: OpaquePointer
    /// Whether this is a client of a message bus (dbus-daemon) — which routes by name, needs
    /// `AddMatch` and stamps senders — rather than a private socket to systemd itself.
    public let isBusClient: Bool

    /// Opens the system bus (dbus-daemon) as its client, at `$DBUS_SYSTEM_BUS_ADDRESS` or the default.
    public static func openSystemBus() throws(SDBusError) -> SDBus {
        var bus: OpaquePointer?
        try SDBusError.check(sd_bus_open_system(&bus), "connect to the system bus")
        return SDBus(bus: bus!, isBusClient: true)
    }

    /// Opens the calling user's bus, at `$DBUS_SESSION_BUS_ADDRESS` or under `$XDG_RUNTIME_DIR`.
    public static func openUserBus() throws(SDBusError) -> SDBus {
        var bus: OpaquePointer?
        try SDBusError.check(sd_bus_open_user(&bus), "connect to the user bus")
        return SDBus(bus: bus!, isBusClient: true)
    }

    /// Connects to `address`: a message bus when `busClient` (it says Hello, routes by name),
    /// else a private socket to systemd itself (`unix:path=/run/systemd/private`).
    public static func connect(address: String, busClient: Bool) throws(SDBusError) -> SDBus {
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
    public var destination: String? { isBusClient ? "org.freedesktop.systemd1" : nil }

    /// This connection's unique name on a message bus (`:1.42`); nil on a private socket.
    public var uniqueName: String? {
        var name: UnsafePointer<CChar>?
        guard sd_bus_get_unique_name(bus, &name) >= 0, let name else { return nil }
        return String(cString: name)
    }

    public var fileDescriptor: Int32 { sd_bus_get_fd(bus) }
    public var events: Int32 { sd_bus_get_events(bus) }
    public var isOpen: Bool { sd_bus_is_open(bus) > 0 }

    /// When sd-bus wants to be called again without I/O (a call's timeout), in milliseconds from
    /// now for poll(2); -1 for never.
    public var pollTimeout: Int32 {
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
    public func process() -> Int32 { sd_bus_process(bus, nil) }

    /// Dispatches, waiting in poll(2), until `answered` holds or `limit` passes — for a caller
    /// that needs an answer before it goes on (a check at start, a question after reconnecting).
    /// False when the limit passed or the connection failed first.
    public func wait(until answered: () -> Bool, within limit: Duration) -> Bool {
        let deadline = ContinuousClock.now + limit
        while !answered() {
            guard ContinuousClock.now < deadline else { return false }
            var dispatched: Int32 = 1
            while dispatched > 0, !answered() { dispatched = process() }
            guard dispatched >= 0, isOpen else { return answered() }
            if !answered() {
                var descriptors = [pollfd(fd: fileDescriptor, events: Int16(truncatingIfNeeded: events), revents: 0)]
                _ = try? System.poll(&descriptors, timeout: 100)
            }
        }
        return true
    }

    /// Calls `handler` with every message that matches `rule` (D-Bus match syntax) from now on,
    /// until the connection closes.
    public func addMatch(_ rule: String, _ handler: @escaping (OpaquePointer) -> Void) throws(SDBusError) {
        let box = Unmanaged.passRetained(MessageHandler(handler))
        var slot: OpaquePointer?
        let result = sd_bus_add_match(bus, &slot, rule, SDBus.dispatch, box.toOpaque())
        guard result >= 0 else {
            box.release()
            throw SDBusError(code: result, doing: "add the match \(rule)")
        }
        keep(slot!)
    }

    /// Calls `handler` with every message the connection receives, before matches and objects
    /// see it: for a reader that matches signals itself (the D-Bus signal source, which sends
    /// its rules to the bus with `AddMatch` and must not have sd-bus reparse them).
    public func addFilter(_ handler: @escaping (OpaquePointer) -> Void) throws(SDBusError) {
        let box = Unmanaged.passRetained(MessageHandler(handler))
        var slot: OpaquePointer?
        let result = sd_bus_add_filter(bus, &slot, SDBus.dispatch, box.toOpaque())
        guard result >= 0 else {
            box.release()
            throw SDBusError(code: result, doing: "add a message filter")
        }
        keep(slot!)
    }

    /// Sends a method call; `reply` gets the reply — or the error sd-bus makes up when the
    /// connection closes first — on this connection's thread, in arrival order with signals.
    public func call(path: String, interface: String, member: String, arguments: [String] = [], uint32Arguments: [UInt32] = [],
                     reply: @escaping (OpaquePointer) -> Void) throws(SDBusError) {
        try call(path: path, interface: interface, member: member, body: { (writer) throws(SDBusError) in
            for argument in arguments { try writer.string(argument) }
            for argument in uint32Arguments { try writer.uint32(argument) }
        }, reply: reply)
    }

    /// Sends a method call whose arguments `body` appends in order (containers, variants: a
    /// `StartTransientUnit` with its properties); `reply` as above. `destination`: another
    /// service on the bus than systemd (polkit). `timeout`: how long sd-bus waits for the reply
    /// before it makes up a timeout error; nil for its default (25 s).
    public func call(path: String, interface: String, member: String, destination: String? = nil, timeout: Duration? = nil,
                     body: (SDBusMessageWriter) throws(SDBusError) -> Void,
                     reply: @escaping (OpaquePointer) -> Void) throws(SDBusError) {
        var message: OpaquePointer?
        try SDBusError.check(sd_bus_message_new_method_call(bus, &message, destination ?? self.destination, path, interface, member),
                             "make a \(member) call")
        defer { sd_bus_message_unref(message) }
        try body(SDBusMessageWriter(message: message!, member: member))
        let box = Unmanaged.passRetained(MessageHandler(reply))
        var slot: OpaquePointer?
        let microseconds = timeout.map { UInt64($0.components.seconds) * 1_000_000 + UInt64($0.components.attoseconds / 1_000_000_000_000) } ?? 0
        let result = sd_bus_call_async(bus, &slot, message, SDBus.dispatch, box.toOpaque(), microseconds)
        guard result >= 0 else {
            box.release()
            throw SDBusError(code: result, doing: "send \(member)")
        }
        keep(slot!)
    }

    /// Sends a signal whose arguments `body` appends, and waits until it is written: for a
    /// program that plays a service on a bus (the D-Bus source's benchmark and tests).
    public func emitSignal(path: String, interface: String, member: String,
                           body: (SDBusMessageWriter) throws(SDBusError) -> Void = { _ in }) throws(SDBusError) {
        var message: OpaquePointer?
        try SDBusError.check(sd_bus_message_new_signal(bus, &message, path, interface, member), "make a \(member) signal")
        defer { sd_bus_message_unref(message) }
        try body(SDBusMessageWriter(message: message!, member: member))
        try SDBusError.check(sd_bus_send(bus, message, nil), "send \(member)")
        try SDBusError.check(sd_bus_flush(bus), "send \(member)")
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
public struct SDBusError: Error, CustomStringConvertible {
    public let code: Int32
    public let doing: String

    public init(code: Int32, doing: String) {
        self.code = code
        self.doing = doing
    }

    public static func check(_ result: Int32, _ doing: @autoclosure () -> String) throws(SDBusError) {
        if result < 0 { throw SDBusError(code: result, doing: doing()) }
    }

    public var description: String { "cannot \(doing): \(String(cString: strerror(-code)))" }
}
