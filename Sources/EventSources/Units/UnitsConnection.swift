import CSystemd
import EventBusKit
import Foundation
import Synchronization
import SystemCalls
import SystemdBus

/// The host's one connection to a service manager, shared by every units source of that
/// manager (``UnitsDriver`` counts them): one sd-bus connection, one `Subscribe`, one set of
/// signal matches, one ``UnitTable``.
///
/// ## Thread
/// The connection runs on a thread of its own (`eventbus.units`), which owns the sd-bus
/// connection and the table: it waits in poll(2) on the bus's descriptor and a wake-up (no
/// timeout while nothing is pending: an idle connection costs no CPU), dispatches what arrived,
/// and posts on each attached source's bus, in order. Sources attach, detach and ask for
/// snapshots from any thread: those are commands the thread takes at its next wake-up.
///
/// ## Priority
/// Where the kernel grants it (``System/setRealtimeScheduling(_:)``), the thread is
/// `SCHED_FIFO` priority 1 while it waits and while it turns signals into transitions and posts
/// them, so a transition reaches its subscribers as soon as dbus-daemon hands it over, however
/// busy the CPUs are — as the timer thread does for ticks. Measured beside two CPU hogs at an
/// ordinary priority, its p99 fell behind `busctl monitor`'s by up to 3.5 ms; real-time, it was
/// ahead (docs/benchmarks.md, Units). Commands (a joiner's snapshot), connecting and listings
/// (a resync of every unit) are larger and not urgent: they run at an ordinary priority.
///
/// ## Exactly the transitions
/// - Signals: `PropertiesChanged` for every object under `/org/freedesktop/systemd1/unit`
///   (turned into transitions by ``UnitTable``), and the Manager's `UnitRemoved`, `JobNew`,
///   `JobRemoved` and `Reloading`. `Subscribe` makes systemd send them at all.
/// - The listing (`ListUnits`) is an asynchronous call, so its reply is dispatched in the order
///   it arrived among the signals: every signal dispatched before it is already in it. Those are
///   applied to the table quietly; the listing then reports the state (snapshot or resync) and
///   the signals after it are the transitions.
/// - The source never asks systemd about a unit: a property query on an unloaded unit loads
///   it, which sends `UnitNew`, and two monitors that query on `UnitNew` loop each other. It
///   asks a job for its type (`JobType`), which loads nothing.
/// - Nothing waits for that question: the job's `queued` event goes out at once, without a
///   type, and the answer rides on its `finished` event. systemd answers on the one ordered
///   stream it signals on, so an answer comes before the job's `JobRemoved`, or the job was
///   already gone when systemd read the question (an error, no type).
///
/// ## Loss
/// When the connection closes (systemd re-executed, dbus-daemon restarted, systemd left the bus)
/// or cannot be made, every attached source gets one `units.gap`; the thread reconnects (at
/// once, then backing off to 5 s), subscribes, lists, and posts the differences as
/// `unit.state` with origin `resync` and a `units.synced`. After `daemon-reload` (`Reloading`
/// false) it lists again too: nothing was lost, but a difference would be reported as a resync.
final class UnitsConnection: SharedConnection, @unchecked Sendable {
    let manager: UnitManager

    private enum Command {
        case attach(UnitsSource)
        case detach(UnitsSource)
        case snapshot(UnitsSource, SubscriberGreeting)
    }

    private let commands = Mutex<(queue: [Command], stopping: Bool)>(([], false))
    /// Signalled to wake the thread, polled by its poll(2); lives as long as the object, so a
    /// late `wake` never writes to a reused descriptor.
    private let wakeUp: System.WakeUp

    // Owned by the connection's thread.
    private var bus: SDBus?
    private var table = UnitTable()
    private var attachments: [ObjectIdentifier: Attachment] = [:]
    private var listing = false
    /// Whether the sources were told they are blind (one `units.gap` per blind period).
    private var blind = false
    /// Why, while blind: a source that attaches then hears this reason, not a vaguer one.
    private var blindReason = ""
    /// What `eventbus status` shows of the connection: following, or unavailable and why.
    /// Written on the thread, read from any.
    private let stateText: Mutex<String>
    private var retryDelayMilliseconds: Int32 = 0
    /// Whether the kernel made the thread real-time (see Priority above).
    private var realtime = false
    private var outbox: [Outgoing] = []
    /// systemd's answers to `JobType` for the followed jobs not finished yet, by job id: taken by
    /// the job's `finished` event.
    private var jobTypes: [UInt32: String] = [:]

    private final class Attachment {
        let source: UnitsSource
        /// It gets a snapshot with the next listing (it attached, or asked, before one finished).
        var needsSnapshot = true
        /// It was told of a gap and waits for the resync.
        var sawGap = false
        /// Subscribers who joined while no snapshot could be taken (listing, blind): each gets
        /// its own after the listing — the snapshot or resync posted to everyone does not reach
        /// them (the bus keeps it from a joiner until its greeting is complete).
        var waitingGreetings: [SubscriberGreeting] = []
        init(source: UnitsSource) { self.source = source }
    }

    private struct Outgoing {
        enum Payload {
            case state(UnitStateChange)
            case job(UnitJob)
            case notice(Event)
        }
        var payload: Payload
        /// Only this source (a snapshot it asked for); nil: every source it concerns.
        var target: ObjectIdentifier?
        /// Only the subscriber this greets (a joiner's own snapshot), through the target source.
        var greeting: SubscriberGreeting? = nil
        /// The last of that greeting (the joiner's snapshot is whole): its subscriber takes what
        /// is posted to everyone from here on. A notice while blind is not.
        var completesGreeting = false
    }

    init(manager: UnitManager) {
        self.manager = manager
        stateText = Mutex("connecting")
        do {
            wakeUp = try System.WakeUp()
        } catch {
            fatalError("units: no wake-up for the connection thread: \(error)")
        }
        let thread = Thread { [self] in
            System.nameCurrentThread("eventbus.units")
            run()
        }
        thread.start()
    }

    /// `following systemd at ADDRESS`, or `unavailable: why` (any thread).
    var state: String { stateText.withLock { $0 } }

    func attach(_ source: UnitsSource) { send(.attach(source)) }
    func detach(_ source: UnitsSource) { send(.detach(source)) }
    func requestSnapshot(for source: UnitsSource, greeting: SubscriberGreeting) { send(.snapshot(source, greeting)) }

    /// Ends the thread (it closes the connection); returns at once, so it may be called on the
    /// thread itself — a subscriber that cancels from inside a delivery.
    func stop() {
        commands.withLock { $0.stopping = true }
        wake()
    }

    private func send(_ command: Command) {
        commands.withLock { $0.queue.append(command) }
        wake()
    }

    private func wake() { wakeUp.signal() }

    // MARK: The thread

    private func run() {
        realtime = (try? System.setRealtimeScheduling(true)) != nil
        while true {
            let (queue, stopping) = commands.withLock { state in
                defer { state.queue.removeAll() }
                return (state.queue, state.stopping)
            }
            if stopping { break }
            if !queue.isEmpty || bus == nil {
                atOrdinaryPriority {
                    for command in queue { take(command) }
                    if bus == nil { connect() }
                    flush()
                }
            }
            if let bus {
                // > 0: a message was dispatched, maybe more are waiting; < 0: the connection failed.
                // What each message makes goes out before the next is read: a transition does not
                // wait behind the signals systemd sent after it (a stop sends several at once).
                var result: Int32 = 1
                while result > 0 {
                    result = bus.process()
                    flush()
                }
                if result < 0 || !bus.isOpen {
                    lose("the connection to \(managerName) closed")
                    self.bus = nil
                    retryDelayMilliseconds = 0
                }
            }
            flush()
            waitForWork()
        }
        bus = nil
    }

    /// Runs `body` as an ordinary thread when this one is real-time; callers post what it made
    /// inside it, so that its subscribers run at that priority too.
    private func atOrdinaryPriority(_ body: () -> Void) {
        guard realtime else { return body() }
        try? System.setRealtimeScheduling(false)
        defer { try? System.setRealtimeScheduling(true) }
        body()
    }

    private var managerName: String {
        switch manager {
        case .system: "systemd"
        case .user: "the user's systemd"
        case .address(let address): "the manager at \(address)"
        }
    }

    private func take(_ command: Command) {
        switch command {
        case .attach(let source):
            let attachment = Attachment(source: source)
            attachments[ObjectIdentifier(source)] = attachment
            if blind {
                attachment.sawGap = true
                outbox.append(Outgoing(payload: .notice(UnitsGap(reason: blindReason).event(source: source.id)),
                                       target: ObjectIdentifier(source)))
            }
            if !listing && bus != nil && !blind { snapshot(for: attachment) }
        case .detach(let source):
            attachments[ObjectIdentifier(source)] = nil
        case .snapshot(let source, let greeting):
            guard let attachment = attachments[ObjectIdentifier(source)] else { return }
            if !listing && bus != nil && !blind {
                snapshot(for: attachment, greeting: greeting)
            } else {
                // Blind: the joiner hears why at once, as those already following did.
                if blind {
                    outbox.append(Outgoing(payload: .notice(UnitsGap(reason: blindReason).event(source: source.id)),
                                           target: ObjectIdentifier(source), greeting: greeting))
                }
                attachment.waitingGreetings.append(greeting)
            }
        }
    }

    /// The state of every unit the source follows, then `units.synced`: to all its subscribers,
    /// or with `greeting`, to the one joining (completing its greeting).
    private func snapshot(for attachment: Attachment, greeting: SubscriberGreeting? = nil) {
        if greeting == nil { attachment.needsSnapshot = false }
        let target = ObjectIdentifier(attachment.source)
        let states = table.snapshot(matching: attachment.source.watch.match)
        for state in states { outbox.append(Outgoing(payload: .state(state), target: target, greeting: greeting)) }
        outbox.append(Outgoing(payload: .notice(UnitsSynced(kind: .snapshot, units: states.count, changedUnits: 0)
            .event(source: attachment.source.id)), target: target, greeting: greeting, completesGreeting: greeting != nil))
    }

    private func waitForWork() {
        var descriptors = [pollfd(fd: wakeUp.descriptor, events: Int16(POLLIN), revents: 0)]
        var timeout: Int32 = -1
        if let bus {
            descriptors.append(pollfd(fd: bus.fileDescriptor, events: Int16(truncatingIfNeeded: bus.events), revents: 0))
            timeout = bus.pollTimeout
        } else {
            timeout = retryDelayMilliseconds
        }
        _ = try? System.poll(&descriptors, timeout: timeout)
        wakeUp.drain()
    }

    // MARK: Connecting

    private func connect() {
        do throws(SDBusError) {
            let bus = try SDBus.connect(to: manager)
            self.bus = bus
            let signalSender = bus.isBusClient ? "sender='org.freedesktop.systemd1'," : ""
            try bus.addMatch("type='signal',\(signalSender)interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='/org/freedesktop/systemd1/unit'") { [unowned self] in
                propertiesChanged($0)
            }
            for member in ["UnitRemoved", "JobNew", "JobRemoved", "Reloading"] {
                try bus.addMatch("type='signal',\(signalSender)path='/org/freedesktop/systemd1',interface='org.freedesktop.systemd1.Manager',member='\(member)'") { [unowned self] in
                    managerSignal($0)
                }
            }
            if bus.isBusClient {
                try bus.addMatch("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.freedesktop.systemd1'") { [unowned self] in
                    ownerChanged($0)
                }
            }
            try subscribeAndList()
            retryDelayMilliseconds = 0
        } catch {
            bus = nil
            lose(unavailable("cannot connect to \(managerName) (tried \(addressesTried)): \(error)"))
            retryDelayMilliseconds = retryDelayMilliseconds == 0 ? 100 : min(5000, retryDelayMilliseconds * 2)
        }
    }

    private func subscribeAndList() throws(SDBusError) {
        guard let bus else { return }
        try bus.call(path: "/org/freedesktop/systemd1", interface: "org.freedesktop.systemd1.Manager", member: "Subscribe") { _ in
            // A second Subscribe (systemd remembered the name across a re-execution) answers
            // "already subscribed": as good as done.
        }
        listing = true
        try bus.call(path: "/org/freedesktop/systemd1", interface: "org.freedesktop.systemd1.Manager", member: "ListUnits") { [unowned self] in
            listed($0)
        }
    }

    /// Where ``SDBus/connect(to:)`` connects for this manager, as the reason for a failure
    /// names it: the private socket when it is used, else the bus's address.
    private var addressesTried: String {
        let environment = ProcessInfo.processInfo.environment
        switch manager {
        case .system:
            if geteuid() == 0, System.isAccessible("/run/systemd/private") { return "unix:path=/run/systemd/private" }
            return "the system bus at " + (environment["DBUS_SYSTEM_BUS_ADDRESS"] ?? "unix:path=/run/dbus/system_bus_socket")
        case .user:
            if let runtime = environment["XDG_RUNTIME_DIR"], System.isAccessible(runtime + "/systemd/private") {
                return "unix:path=\(runtime)/systemd/private"
            }
            return "the user bus at " + (environment["DBUS_SESSION_BUS_ADDRESS"] ?? "unix:path=\(environment["XDG_RUNTIME_DIR"] ?? "$XDG_RUNTIME_DIR")/bus")
        case .address(let address):
            return address
        }
    }

    /// `reason`, led by what it means when the system manager is not systemd at all — PID 1 is
    /// something else (a container's init, a shell) — so the gap says there is nothing to
    /// follow rather than something to wait for. `/run/systemd/system` is systemd's own sign
    /// that it runs as PID 1 (`sd_booted`).
    private func unavailable(_ reason: String) -> String {
        guard case .system = manager, !System.isAccessible("/run/systemd/system") else { return reason }
        return "no systemd manager to follow: PID 1 is not systemd (no /run/systemd/system); \(reason)"
    }

    /// The connection is gone or systemd is: every source hears it once.
    private func lose(_ reason: String) {
        stateText.withLock { $0 = "unavailable: \(reason)" }
        blindReason = reason
        if let bus, !bus.isOpen { self.bus = nil }
        listing = false
        // The questions' answers are gone with the connection: the jobs finish without a type.
        jobTypes.removeAll()
        guard !blind else { return }
        blind = true
        for attachment in attachments.values {
            attachment.sawGap = true
            outbox.append(Outgoing(payload: .notice(UnitsGap(reason: reason).event(source: attachment.source.id)),
                                   target: ObjectIdentifier(attachment.source)))
        }
    }

    // MARK: Messages

    private func listed(_ message: OpaquePointer) {
        atOrdinaryPriority {
            applyListing(message)
            flush()
        }
    }

    private func applyListing(_ message: OpaquePointer) {
        let reader = SDBusMessageReader(message)
        if let error = reader.errorName {
            listing = false
            lose(unavailable("cannot list the units of \(managerName) (at \(addressesTried)): \(error)"))
            bus = nil  // reconnect: the retry delay paces it
            retryDelayMilliseconds = max(retryDelayMilliseconds, 100)
            return
        }
        var units: [String: UnitTable.Listed] = [:]
        guard reader.enter("a", "(ssssssouso)") else {
            listing = false
            return
        }
        while reader.enter("r", "ssssssouso") {
            guard let name = reader.string(), reader.string() != nil, let load = reader.string(), let active = reader.string(),
                  let sub = reader.string(), reader.string() != nil, reader.objectPath() != nil, reader.uint32() != nil,
                  reader.string() != nil, reader.objectPath() != nil else { return }
            units[name] = UnitTable.Listed(activeState: active, subState: sub, loadState: load)
            reader.exit()
        }
        reader.exit()
        listing = false
        blind = false
        stateText.withLock { $0 = "following \(managerName) at \(addressesTried)" }
        let changes = table.resync(with: units)
        for attachment in attachments.values {
            if attachment.needsSnapshot {
                attachment.sawGap = false
                snapshot(for: attachment)
            } else {
                let mine = changes.filter { attachment.source.watch.match.matches($0.unit) }
                let target = ObjectIdentifier(attachment.source)
                for change in mine { outbox.append(Outgoing(payload: .state(change), target: target)) }
                if attachment.sawGap || !mine.isEmpty {
                    attachment.sawGap = false
                    let matching = units.keys.filter(attachment.source.watch.match.matches).count
                    outbox.append(Outgoing(payload: .notice(UnitsSynced(kind: .resync, units: matching, changedUnits: mine.count)
                        .event(source: attachment.source.id)), target: target))
                }
            }
            for greeting in attachment.waitingGreetings { snapshot(for: attachment, greeting: greeting) }
            attachment.waitingGreetings = []
        }
    }

    private func propertiesChanged(_ message: OpaquePointer) {
        let reader = SDBusMessageReader(message)
        guard let path = reader.path, let unit = UnitPath.unitName(of: path), let interface = reader.string(),
              let properties = reader.properties() else { return }
        if interface == "org.freedesktop.systemd1.Unit" {
            if let change = table.applyUnitProperties(unit: unit, properties, announce: !listing) {
                outbox.append(Outgoing(payload: .state(change), target: nil))
            }
        } else if interface.hasPrefix("org.freedesktop.systemd1.") {
            table.applyTypeProperties(unit: unit, properties)
        }
    }

    private func managerSignal(_ message: OpaquePointer) {
        let reader = SDBusMessageReader(message)
        switch reader.member {
        case "UnitRemoved":
            guard let unit = reader.string() else { return }
            table.remove(unit: unit)
        case "JobNew":
            guard let id = reader.uint32(), let path = reader.objectPath(), let unit = reader.string() else { return }
            guard attachments.values.contains(where: { $0.source.watch.match.matches(unit) }) else { return }
            lookUpJobType(id: id, path: path)
            outbox.append(Outgoing(payload: .job(UnitJob(unit: unit, id: id, phase: .queued, type: nil, result: nil)), target: nil))
        case "JobRemoved":
            guard let id = reader.uint32(), reader.objectPath() != nil, let unit = reader.string(), let result = reader.string() else { return }
            let type = jobTypes.removeValue(forKey: id)
            guard attachments.values.contains(where: { $0.source.watch.match.matches(unit) }) else { return }
            outbox.append(Outgoing(payload: .job(UnitJob(unit: unit, id: id, phase: .finished, type: type, result: result)), target: nil))
        case "Reloading":
            // After a daemon-reload: list again; what differs is reported as a resync.
            if reader.bool() == false, !listing {
                listing = true
                do throws(SDBusError) {
                    try bus?.call(path: "/org/freedesktop/systemd1", interface: "org.freedesktop.systemd1.Manager", member: "ListUnits") { [unowned self] in
                        listed($0)
                    }
                } catch {
                    lose("cannot list the units of \(managerName) after a reload: \(error)")
                }
            }
        default:
            break
        }
    }

    /// The signals do not say what a job does: ask the job (loads no unit), and keep the answer
    /// for its `finished` event. Nothing waits for it — not the `queued` event, not a transition.
    /// No answer (the job was gone, the call failed) leaves the job without a type.
    private func lookUpJobType(id: UInt32, path: String) {
        try? bus?.call(path: path, interface: "org.freedesktop.DBus.Properties", member: "Get",
                       arguments: ["org.freedesktop.systemd1.Job", "JobType"]) { [unowned self] message in
            let reader = SDBusMessageReader(message)
            if reader.errorName == nil, case .some(.some(.string(let type))) = reader.variant() {
                jobTypes[id] = type
            }
        }
    }

    /// systemd left the bus or came back (a re-execution, a restart): blind until it is back,
    /// then subscribe and list again.
    private func ownerChanged(_ message: OpaquePointer) {
        let reader = SDBusMessageReader(message)
        guard reader.string() != nil, let old = reader.string(), let new = reader.string() else { return }
        if !old.isEmpty { lose("systemd left the bus (re-executed or restarted)") }
        if !new.isEmpty {
            do throws(SDBusError) { try subscribeAndList() } catch { lose("cannot subscribe again: \(error)") }
        }
    }

    // MARK: Posting

    /// Posts the outbox in order.
    private func flush() {
        guard !outbox.isEmpty else { return }
        // Per source, runs in outbox order: to all its subscribers (no greeting), or to one
        // joiner — so a joiner's snapshot and the changes after it keep their order.
        var runs: [ObjectIdentifier: [(greeting: SubscriberGreeting?, events: [Event], completing: Bool)]] = [:]
        for item in outbox {
            for (key, attachment) in attachments where item.target == nil || item.target == key {
                let source = attachment.source
                let event: Event
                switch item.payload {
                case .state(let change) where source.watch.match.matches(change.unit): event = change.event(source: source.id)
                case .job(let job) where source.watch.match.matches(job.unit): event = job.event(source: source.id)
                case .notice(let notice): event = notice
                default: continue
                }
                var sourceRuns = runs[key, default: []]
                if let last = sourceRuns.last, last.greeting == item.greeting {
                    sourceRuns[sourceRuns.count - 1].events.append(event)
                    sourceRuns[sourceRuns.count - 1].completing = item.completesGreeting
                } else {
                    sourceRuns.append((item.greeting, [event], item.completesGreeting))
                }
                runs[key] = sourceRuns
            }
        }
        outbox.removeAll(keepingCapacity: true)
        for (key, sourceRuns) in runs {
            guard let source = attachments[key]?.source else { continue }
            for run in sourceRuns {
                if let greeting = run.greeting {
                    greeting.post(contentsOf: run.events, completing: run.completing)
                } else {
                    source.post(run.events)
                }
            }
        }
    }
}
