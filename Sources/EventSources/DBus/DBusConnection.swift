import EventBusKit
import Foundation
import Synchronization
import SystemCalls
import SystemdBus

/// The host's one connection to a message bus, shared by every D-Bus source of that bus
/// (``DBusDriver`` counts them): one sd-bus connection, one `AddMatch` per distinct rule, one
/// message filter that reads each signal once and hands it to every source whose watch takes it.
///
/// ## Thread
/// The connection runs on a thread of its own, `eventbus.dbus` (one per bus), which owns the
/// sd-bus connection, the rules, the sender owners and the attached sources' blind times: it
/// waits in poll(2) on the bus's descriptor and its ``System/WakeUp`` (no timeout while
/// connected and nothing is pending: an idle connection costs no CPU), dispatches what
/// arrived, and posts on each attached source's bus, in arrival order (across sources too).
/// Sources attach and detach from any thread:
/// those are commands the thread takes at its next wake-up. ``state`` and ``refusal(of:)`` are
/// read from any thread.
///
/// ## Matching
/// Each watch's ``DBusMatch/rule`` goes to the bus as an `AddMatch` call, quoted as
/// dbus-daemon reads it — not through `sd_bus_add_match`, whose parser reads backslashes in
/// quotes differently and would make a hostile `arg0` mean two things. A filter sees every
/// message; a signal whose header no watch takes is skipped unread, any other is read once
/// (``DBusReceivedSignal``) and matched against each watch's values. The bus sends a message
/// once per connection however many rules take it, so each watch gets each signal once.
/// Well-known senders are followed to their owners (``DBusSenderOwners``).
///
/// ## Loss
/// When the connection closes (the bus daemon stopped or restarted, it dropped the client) or
/// cannot be made, the thread reconnects: 100 ms after the loss, then backing off to 5 s. The
/// status says `unavailable: why` meanwhile. Once connected again it adds every rule anew and
/// asks every owner again; when the bus answers the first of those calls — a socket that
/// connects is not yet a bus that is there: a daemon being killed can accept a connection it
/// will never serve — the outage is over: each source that was blind gets one `dbus.gap`, with
/// how long it was, before any signal of the new connection (whose rules' answers come first).
/// A source that attaches while the bus is away is blind from then on.
final class DBusConnection: SharedConnection, @unchecked Sendable {
    let bus: DBusBus

    private enum Command {
        case attach(DBusSource)
        case detach(DBusSource)
    }

    private let commands = Mutex<(queue: [Command], stopping: Bool)>(([], false))
    /// Signalled to wake the thread from its poll(2).
    private let wakeUp: System.WakeUp
    /// What `eventbus status` shows: following, or unavailable and why. Written on the thread.
    private let stateText: Mutex<String>
    /// Sources whose rule was not added, and why (the bus's answer). Written on the thread.
    private let refusals = Mutex<[String: String]>([:])

    // Owned by the connection's thread.
    private var connection: SDBus?
    /// Counts connections, so answers to calls on a closed one are told apart and dropped.
    private var generation = 0
    private var attachments: [Attachment] = []
    /// Rules added on the current connection, with how many attached watches use each.
    private var rules: [String: Int] = [:]
    /// Rules of the current connection that were not added, and why: a source attaching with
    /// one hears it at once.
    private var refusedRules: [String: String] = [:]
    private let owners = DBusSenderOwners()
    /// Why the bus is away, since when; nil while connected (or before the first try).
    private var outage: (reason: String, since: ContinuousClock.Instant)?
    /// The current connection has not had an answer from the bus yet.
    private var awaitingAnswer = false
    private var retryDelay: Duration = .zero
    private var nextAttempt = ContinuousClock.now
    /// Events in posting order, each for one source.
    private var outbox: [(source: ObjectIdentifier, event: Event)] = []

    /// Messages dispatched between two postings of the outbox.
    private static let batch = 256

    private final class Attachment {
        let source: DBusSource
        /// While the source cannot see: since when, and why (its `dbus.gap` when back).
        var blind: (reason: String, since: ContinuousClock.Instant, wall: Date)?
        init(source: DBusSource) { self.source = source }
    }

    init(bus: DBusBus) {
        self.bus = bus
        stateText = Mutex("connecting to the \(Self.name(of: bus))")
        do {
            wakeUp = try System.WakeUp()
        } catch {
            fatalError("dbus: no wake-up for the connection thread: \(error)")
        }
        let thread = Thread { [self] in
            System.nameCurrentThread("eventbus.dbus")
            run()
        }
        thread.start()
    }

    /// `following system bus`, or `unavailable: why` (any thread).
    var state: String { stateText.withLock { $0 } }

    /// `unavailable: the match rule … was not added: …` for a source whose rule the bus
    /// refused; nil otherwise (any thread).
    func refusal(of sourceID: String) -> String? { refusals.withLock { $0[sourceID] } }

    func attach(_ source: DBusSource) { send(.attach(source)) }
    func detach(_ source: DBusSource) { send(.detach(source)) }

    /// Ends the thread (it closes the connection); returns at once, so it may be called on the
    /// thread itself — a subscriber that cancels from inside a delivery.
    func stop() {
        commands.withLock { $0.stopping = true }
        wakeUp.signal()
    }

    private func send(_ command: Command) {
        commands.withLock { $0.queue.append(command) }
        wakeUp.signal()
    }

    // MARK: The thread

    private func run() {
        while true {
            let (queue, stopping) = commands.withLock { state in
                defer { state.queue.removeAll() }
                return (state.queue, state.stopping)
            }
            if stopping { break }
            for command in queue { take(command) }
            if connection == nil, ContinuousClock.now >= nextAttempt { connect() }
            var more = false
            if let connection {
                // > 0: a message was dispatched, maybe more are waiting; < 0: the connection failed.
                // At most a batch before posting: a flood of signals neither holds events back
                // nor keeps commands waiting.
                var result: Int32 = 1
                var dispatched = 0
                while result > 0 && dispatched < Self.batch {
                    result = connection.process()
                    dispatched += 1
                }
                more = result > 0
                if result < 0 || !connection.isOpen {
                    let why = result < 0 ? " (\(String(cString: strerror(-result))))" : ""
                    lose("the connection to the \(Self.name(of: bus)) closed\(why)")
                    more = false
                }
            }
            flush()
            if !more { waitForWork() }
        }
        connection = nil
    }

    private func waitForWork() {
        var descriptors = [pollfd(fd: wakeUp.descriptor, events: Int16(POLLIN), revents: 0)]
        var timeout: Int32 = -1
        if let connection {
            descriptors.append(pollfd(fd: connection.fileDescriptor, events: Int16(truncatingIfNeeded: connection.events), revents: 0))
            timeout = connection.pollTimeout
        } else {
            let wait = max(.zero, nextAttempt - ContinuousClock.now)
            timeout = Int32(clamping: wait.components.seconds * 1000 + wait.components.attoseconds / 1_000_000_000_000_000 + 1)
        }
        _ = try? System.poll(&descriptors, timeout: timeout)
        wakeUp.drain()
    }

    private func take(_ command: Command) {
        switch command {
        case .attach(let source):
            let attachment = Attachment(source: source)
            if let outage { attachment.blind = (outage.reason, .now, Date()) }
            attachments.append(attachment)
            if connection != nil { install(source.watch.match) }
        case .detach(let source):
            attachments.removeAll { $0.source === source }
            refusals.withLock { $0[source.id] = nil }
            guard let connection else { return }
            let rule = source.watch.match.rule
            rules[rule, default: 1] -= 1
            if rules[rule] == 0 {
                rules[rule] = nil
                callBus(connection, "RemoveMatch", rule) { _ in }
            }
            if let name = source.watch.match.wellKnownSender,
               !attachments.contains(where: { $0.source.watch.match.wellKnownSender == name }) {
                owners.forget(name)
                callBus(connection, "RemoveMatch", Self.ownerRule(name)) { _ in }
            }
        }
    }

    // MARK: Connecting

    private func connect() {
        do throws(SDBusError) {
            let connection = try SDBus.open(bus)
            generation += 1
            try connection.addFilter { [unowned self] message in received(message) }
            self.connection = connection
            rules = [:]
            refusedRules = [:]
            refusals.withLock { $0 = [:] }
            for name in owners.names { owners.forget(name) }
            awaitingAnswer = true
            for attachment in attachments { install(attachment.source.watch.match) }
            if attachments.isEmpty { answered() }
        } catch {
            connection = nil
            lose("\(error)")
        }
    }

    /// The error of the replies sd-bus makes up itself (a connection that failed, a timeout).
    private static let noReply = "org.freedesktop.DBus.Error.NoReply"

    /// The bus answered a call of the current connection: on the first answer, the outage is
    /// over and the blind sources hear how long it was.
    private func answered() {
        guard awaitingAnswer else { return }
        awaitingAnswer = false
        retryDelay = .zero
        outage = nil
        stateText.withLock { $0 = "following \(Self.name(of: bus))" }
        let now = ContinuousClock.now
        for attachment in attachments {
            guard let blind = attachment.blind else { continue }
            attachment.blind = nil
            let down = now - blind.since
            let seconds = Double(down.components.seconds) + Double(down.components.attoseconds) / 1e18
            outbox.append((ObjectIdentifier(attachment.source),
                           DBusGap(bus: bus.description, reason: blind.reason, lostAt: blind.wall, downSeconds: seconds)
                               .event(source: attachment.source.id)))
        }
    }

    /// Adds `match`'s rule unless the connection has it, and follows its well-known sender.
    /// The owner's rule goes first and its question last, so every owner change after the
    /// answer comes as a signal (``DBusSenderOwners``). A rule that was not added makes the
    /// status of every source with it `unavailable`, with the bus's answer.
    private func install(_ match: DBusMatch) {
        guard let connection else { return }
        let name = match.wellKnownSender
        let following = name.map(owners.isFollowing) ?? true
        if let name, !following {
            owners.follow(name)
            callBus(connection, "AddMatch", Self.ownerRule(name)) { _ in }
        }
        let rule = match.rule
        if let users = rules[rule] {
            rules[rule] = users + 1
            if let why = refusedRules[rule] { refuse(rule, why) }
        } else {
            rules[rule] = 1
            callBus(connection, "AddMatch", rule) { [unowned self] error in
                guard let error else { return }
                refusedRules[rule] = error
                refuse(rule, error)
            }
        }
        if let name, !following {
            callBus(connection, "GetNameOwner", name, reading: { $0.string() }) { [unowned self] owner, _ in
                owners.resolved(name, owner: owner, route: route)
            }
        }
    }

    /// Every attached source with `rule` is told its rule was not added.
    private func refuse(_ rule: String, _ why: String) {
        let ids = attachments.filter { $0.source.watch.match.rule == rule }.map(\.source.id)
        refusals.withLock { refusals in
            for id in ids { refusals[id] = "unavailable: the match rule \(rule) was not added: \(why)" }
        }
    }

    /// `type='signal',sender='org.freedesktop.DBus',…,member='NameOwnerChanged',arg0=name`.
    private static func ownerRule(_ name: String) -> String {
        DBusMatch(sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                  member: "NameOwnerChanged", arguments: [0: name]).rule
    }

    /// Calls a method of the bus itself with one string; `done` gets the error name and message
    /// of a failed answer (or why the call could not be sent), nil for success — unless the
    /// connection was replaced meanwhile.
    private func callBus(_ connection: SDBus, _ member: String, _ argument: String, done: @escaping (String?) -> Void) {
        callBus(connection, member, argument, reading: { _ in () }) { _, error in done(error) }
    }

    private func callBus<Answer>(_ connection: SDBus, _ member: String, _ argument: String,
                                 reading: @escaping (SDBusMessageReader) -> Answer?,
                                 done: @escaping (Answer?, String?) -> Void) {
        let generation = generation
        do throws(SDBusError) {
            try connection.call(path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: member,
                                destination: "org.freedesktop.DBus", body: { (writer) throws(SDBusError) in try writer.string(argument) }) {
                [unowned self] message in
                guard generation == self.generation else { return }
                let reader = SDBusMessageReader(message)
                // sd-bus answers pending calls itself with `NoReply` when the connection fails or
                // a call times out: no sign of the bus, which never gives that for its own methods.
                if reader.errorName?.hasPrefix(Self.noReply) != true { answered() }
                if let error = reader.errorName { done(nil, error) } else { done(reading(reader), nil) }
            }
        } catch {
            done(nil, "\(error)")
        }
    }

    /// The bus is away: the status says why, every attached source is blind from now (once:
    /// an outage that goes on keeps its first reason), and the next attempt is scheduled.
    private func lose(_ reason: String) {
        connection = nil
        awaitingAnswer = false
        generation += 1
        owners.connectionLost(route: route)
        rules = [:]
        refusedRules = [:]
        let now = ContinuousClock.now
        if outage == nil { outage = (reason, now) }
        for attachment in attachments where attachment.blind == nil { attachment.blind = (reason, now, Date()) }
        retryDelay = retryDelay == .zero ? .milliseconds(100) : min(.seconds(5), retryDelay * 2)
        nextAttempt = now + retryDelay
        let retry = retryDelay < .seconds(1) ? "\(retryDelay.components.attoseconds / 1_000_000_000_000_000) ms"
            : "\(retryDelay.components.seconds) s"
        stateText.withLock { $0 = "unavailable: \(reason) (trying again in \(retry))" }
    }

    // MARK: Messages

    /// The filter: every message the connection receives, on the thread, in order.
    private func received(_ message: OpaquePointer) {
        let reader = SDBusMessageReader(message)
        guard reader.isSignal else { return }
        let header = DBusSignalHeader(reading: reader)
        let followsOwners = header.isOwnerChange && owners.isFollowingAny
        guard followsOwners || attachments.contains(where: { $0.source.watch.match.headerMatches(header) }) else { return }
        let signal = DBusReceivedSignal(reading: reader)
        if followsOwners, let change = signal.ownerChange {
            owners.ownerChanged(name: change.name, old: change.old, new: change.new)
        }
        owners.receive(signal, route: route)
    }

    /// Hands `received` to every attached source whose watch takes it, as that source's event.
    private func route(_ received: DBusReceivedSignal) {
        for attachment in attachments {
            let source = attachment.source
            guard source.watch.match.matches(received, owner: owners.owner(of:)) else { continue }
            let event: Event?
            if let preset = source.watch.preset {
                event = DBusPresetEvents.event(of: preset, for: received.signal, source: source.id, monotonicNanoseconds: received.receivedAt)
            } else {
                event = received.signal.event(source: source.id, monotonicNanoseconds: received.receivedAt)
            }
            if let event { outbox.append((ObjectIdentifier(source), event)) }
        }
    }

    // MARK: Posting

    /// Posts the outbox in arrival order, consecutive events of one source as one batch: each
    /// source's events stay in order, and so do events of different sources of this bus (a
    /// session's `Unlock` before its `SessionRemoved`, whichever watches take them).
    private func flush() {
        guard !outbox.isEmpty else { return }
        let sources = Dictionary(attachments.map { (ObjectIdentifier($0.source), $0.source) }, uniquingKeysWith: { first, _ in first })
        var start = outbox.startIndex
        while start < outbox.endIndex {
            let key = outbox[start].source
            var end = start + 1
            while end < outbox.endIndex, outbox[end].source == key { end += 1 }
            sources[key]?.post(outbox[start..<end].map(\.event))
            start = end
        }
        outbox.removeAll(keepingCapacity: true)
    }

    /// `system bus`, `user bus`, `bus at ADDRESS`: for the status and reasons.
    static func name(of bus: DBusBus) -> String {
        switch bus {
        case .system: "system bus"
        case .user: "user bus"
        case .address(let address): "bus at \(address)"
        }
    }
}
