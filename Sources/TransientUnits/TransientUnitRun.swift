import CSystemd
import Foundation
import RuleActions
import Synchronization
import SystemCalls
import SystemdBus

/// One command as one transient unit, from `StartTransientUnit` to its end, on a thread of its
/// own (`eventbus.unit`) that owns the run's own sd-bus connection.
///
/// ## Why a connection and a thread per run
/// sd-bus objects are not thread-safe, and a run waits for signals for as long as its command
/// runs. One connection per run keeps runs apart: the signals it matches are its unit's only,
/// nothing routes them between runs, and a run that ends closes everything it opened. Opening
/// a connection costs a socket and an authentication (about a millisecond), small beside a
/// process start; a thread that sleeps in poll(2) costs no CPU. The async caller only waits
/// on a continuation: no cooperative thread ever blocks.
///
/// ## Race-free
/// The signals are matched, and `Subscribe` sent, before `StartTransientUnit`: the unit cannot
/// change before the run hears of it. What they say, and when the unit is over, is
/// ``UnitRunState``'s.
///
/// ## Cancelling
/// ``cancel()`` may come from any thread, at any time: before the start (nothing is started:
/// `stopped`), while the start call is under way (`StopUnit` as soon as it is answered), or
/// while the unit runs (`StopUnit(name, "replace")`: SIGTERM to its processes, SIGKILL after
/// `TimeoutStopSec=`). The run then waits for the unit to be gone and reports `stopped` — unless
/// systemd refused the stop, and then the unit's own end.
final class TransientUnitRun: @unchecked Sendable {
    private let spec: CommandSpec
    private let properties: [(name: String, value: SDBusVariant)]
    private let endpoint: TransientUnitLauncher.Endpoint
    private let started: @Sendable (CommandStart) -> Void
    private let cancelled = Atomic<Bool>(false)
    /// Signalled to wake the thread (a cancel), polled by it.
    private let wakeUp: System.WakeUp

    // The thread's own.
    private let unitPath: String
    private var state: UnitRunState
    private var startRefusal: String?
    private var stopSent = false
    /// systemd refused the StopUnit (polkit allowed the start but not the stop): the unit runs
    /// on until it ends by itself or its RuntimeMaxSec= ends it, and its outcome is that end.
    private var stopRefusal: String?
    private var startTold = false
    /// systemd said `UnitRemoved` for the unit: gone, or a reload under way (see managerSignal).
    private var removalToCheck = false
    private var startInstant: ContinuousClock.Instant?
    /// After a start job that did not succeed, how long the run waits for the unit's last state.
    private var failedJobDeadline: ContinuousClock.Instant?

    private static let managerPath = "/org/freedesktop/systemd1"
    private static let managerInterface = "org.freedesktop.systemd1.Manager"

    init(spec: CommandSpec, properties: [(name: String, value: SDBusVariant)], endpoint: TransientUnitLauncher.Endpoint,
         started: @escaping @Sendable (CommandStart) -> Void) {
        self.spec = spec
        self.properties = properties
        self.endpoint = endpoint
        self.started = started
        unitPath = UnitPath.path(of: spec.unitName)
        state = UnitRunState(unit: spec.unitName)
        do { wakeUp = try System.WakeUp() } catch {
            fatalError("transient unit: no wake-up for the run's thread: \(error)")
        }
    }

    /// Starts the thread; `finished` gets the outcome on it, once.
    func start(finished: @escaping @Sendable (CommandOutcome) -> Void) {
        let thread = Thread { [self] in
            System.nameCurrentThread("eventbus.unit")
            // The connection is closed when execute returns: its matches and calls go with it.
            let outcome = execute()
            finished(outcome)
        }
        thread.start()
    }

    /// Stops the command (or keeps it from starting); from any thread.
    func cancel() {
        cancelled.store(true, ordering: .releasing)
        wakeUp.signal()
    }

    // MARK: The thread

    private func execute() -> CommandOutcome {
        if cancelled.load(ordering: .acquiring) { return CommandOutcome(termination: .stopped, duration: .zero) }
        var bus: SDBus
        do throws(SDBusError) {
            bus = try watch()
            let name = spec.unitName
            let properties = properties
            startInstant = .now
            try bus.call(path: Self.managerPath, interface: Self.managerInterface, member: "StartTransientUnit", body: { (writer) throws(SDBusError) in
                try writer.string(name)
                // "fail": refuse rather than replace a job already queued for a unit of this name.
                try writer.string("fail")
                try writer.properties(properties)
                try writer.container("a", "(sa(sv))") { () throws(SDBusError) in }  // no auxiliary units
            }, reply: { [unowned self] in startAnswered($0) })
        } catch {
            return CommandOutcome(termination: .failedToStart("cannot ask systemd at \(endpoint.address) to start \(spec.unitName): \(error)"),
                                  duration: .zero)
        }

        while true {
            // > 0: a message was dispatched, maybe more are waiting; < 0: the connection failed.
            var dispatched: Int32 = 1
            while dispatched > 0 { dispatched = bus.process() }
            if let startRefusal {
                return CommandOutcome(termination: .failedToStart(startRefusal), duration: .zero)
            }
            if removalToCheck, bus.isOpen {
                removalToCheck = false
                switch readBack(bus) {
                case .there(let properties): for set in properties { state.propertiesChanged(set) }
                case .gone: state.unitRemoved(spec.unitName)
                case .unclear:
                    removalToCheck = true
                    System.sleep(for: .milliseconds(100))
                    continue
                }
            }
            if let outcome = outcomeIfOver() { return outcome }
            if dispatched < 0 || !bus.isOpen {
                let reason = dispatched < 0 ? String(cString: strerror(-dispatched)) : "closed"
                switch reattach(after: reason) {
                case .watching(let again): bus = again
                case .ended(let outcome): return outcome
                }
                continue
            }
            if cancelled.load(ordering: .acquiring), state.jobPath != nil, !stopSent { stop(bus) }
            waitForWork(bus)
        }
    }

    /// A connection with the run's matches in place and `Subscribe` sent.
    private func watch() throws(SDBusError) -> SDBus {
        let bus = try SDBus.connect(address: endpoint.address, busClient: endpoint.busClient)
        let sender = bus.isBusClient ? "sender='org.freedesktop.systemd1'," : ""
        try bus.addMatch("type='signal',\(sender)interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path='\(unitPath)'") { [unowned self] in
            propertiesChanged($0)
        }
        for member in ["JobRemoved", "UnitRemoved"] {
            try bus.addMatch("type='signal',\(sender)path='\(Self.managerPath)',interface='\(Self.managerInterface)',member='\(member)'") { [unowned self] in
                managerSignal($0)
            }
        }
        // Without it systemd sends a bus client no unit signals at all.
        try bus.call(path: Self.managerPath, interface: Self.managerInterface, member: "Subscribe") { _ in }
        return bus
    }

    /// The connection closed (systemd re-executed — a systemd upgrade does that —, dbus-daemon
    /// restarted): connect again (every 100 ms, backing off to 1 s, for up to a minute), watch
    /// again, and read the unit's state as it is now. The unit is a unit of systemd's, not of
    /// this connection, so it ran on meanwhile; only what happened while no one listened has to
    /// be read back. Gone meanwhile: its end was not seen, and the outcome says so.
    private func reattach(after reason: String) -> Reattached {
        let lost = "the connection to systemd at \(endpoint.address) closed (\(reason))"
        let deadline = ContinuousClock.now + .seconds(60)
        var delay = 100
        var trouble = reason
        while true {
            if let bus = try? watch() {
                switch readBack(bus) {
                case .there(let properties):
                    for set in properties { state.propertiesChanged(set) }
                    state.startJobUnseen()
                    if state.jobPath == nil { state.jobPath = "" }  // it was started: a cancel may stop it
                    // A StopUnit sent before may have been lost with the connection: again.
                    stopSent = false
                    stopRefusal = nil
                    return .watching(bus)
                case .gone:
                    state.unitRemoved(spec.unitName)
                    if state.isOver { return .watching(bus) }  // its end was heard before the loss
                    if state.jobPath == nil && !stopSent {
                        return .ended(CommandOutcome(termination: .failedToStart("\(lost) before systemd answered the start, and \(spec.unitName) is not there"),
                                                     duration: .zero))
                    }
                    return .ended(CommandOutcome(termination: stopSent && stopRefusal == nil ? .stopped
                                                     : .failedToStart("\(lost), and \(spec.unitName) ended meanwhile: how it ended was not seen"),
                                                 duration: elapsed, outputTail: tail()))
                case .unclear(let text):
                    trouble = text
                }
            }
            guard ContinuousClock.now < deadline else {
                return .ended(CommandOutcome(termination: .failedToStart("\(lost) and could not be read again within a minute (\(trouble)): \(spec.unitName) may still run"),
                                             duration: elapsed))
            }
            System.sleep(for: .milliseconds(delay))
            delay = min(1000, delay * 2)
        }
    }

    private enum ReadBack {
        /// The unit's Unit and Service properties as they are now.
        case there([[String: PropertyValue]])
        /// systemd has no such unit any more (`NoSuchUnit`).
        case gone
        /// No clear answer (systemd still starting again, the connection closed again): try again.
        case unclear(String)
    }

    /// Asks systemd for the unit (`GetUnit`, which loads nothing: a unit that is gone stays gone)
    /// and, when it is there, its properties.
    private func readBack(_ bus: SDBus) -> ReadBack {
        var unitAnswer: String??
        var properties: [[String: PropertyValue]] = []
        do throws(SDBusError) {
            try bus.call(path: Self.managerPath, interface: Self.managerInterface, member: "GetUnit", arguments: [spec.unitName]) { reply in
                unitAnswer = .some(SDBusMessageReader(reply).errorName)
            }
            guard bus.wait(until: { unitAnswer != nil }, within: .seconds(10)), let answer = unitAnswer else { return .unclear("no answer to GetUnit") }
            if let error = answer {
                return error.hasPrefix("org.freedesktop.systemd1.NoSuchUnit") ? .gone : .unclear(error)
            }
            for interface in ["org.freedesktop.systemd1.Unit", "org.freedesktop.systemd1.Service"] {
                try bus.call(path: unitPath, interface: "org.freedesktop.DBus.Properties", member: "GetAll", arguments: [interface]) { reply in
                    let reader = SDBusMessageReader(reply)
                    properties.append(reader.errorName == nil ? reader.properties() ?? [:] : [:])
                }
            }
            guard bus.wait(until: { properties.count == 2 }, within: .seconds(10)) else { return .unclear("no answer to GetAll") }
        } catch {
            return .unclear(error.description)
        }
        return .there(properties)
    }

    private enum Reattached {
        case watching(SDBus)
        /// The run is over: the unit ended unseen, or systemd could not be reached again.
        case ended(CommandOutcome)
    }

    private var elapsed: Duration { startInstant.map { ContinuousClock.now - $0 } ?? .zero }

    private func stop(_ bus: SDBus) {
        stopSent = true
        do throws(SDBusError) {
            try bus.call(path: Self.managerPath, interface: Self.managerInterface, member: "StopUnit",
                         arguments: [spec.unitName, "replace"]) { [unowned self] reply in
                // Refused (polkit): the unit runs on until it ends or its RuntimeMaxSec= stops it.
                if let error = SDBusMessageReader(reply).errorName { stopRefusal = error }
            }
        } catch {
            stopRefusal = error.description
        }
    }

    private func waitForWork(_ bus: SDBus) {
        var descriptors = [pollfd(fd: wakeUp.descriptor, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: bus.fileDescriptor, events: Int16(truncatingIfNeeded: bus.events), revents: 0)]
        var timeout = bus.pollTimeout
        if let failedJobDeadline {
            let left = failedJobDeadline - ContinuousClock.now
            let milliseconds = max(0, Int32(clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            timeout = timeout < 0 ? milliseconds : min(timeout, milliseconds)
        }
        _ = try? System.poll(&descriptors, timeout: timeout)
        wakeUp.drain()
    }

    // MARK: Messages

    private func startAnswered(_ reply: OpaquePointer) {
        let reader = SDBusMessageReader(reply)
        if let error = reader.errorName {
            startRefusal = "systemd refused to start \(spec.unitName): \(error)"
        } else {
            state.jobPath = reader.objectPath()
        }
    }

    private func managerSignal(_ message: OpaquePointer) {
        let reader = SDBusMessageReader(message)
        switch reader.member {
        case "JobRemoved":
            guard reader.uint32() != nil, let path = reader.objectPath(), let unit = reader.string(), let result = reader.string() else { return }
            let failedBefore = state.startJobFailed
            state.jobRemoved(path: path, unit: unit, result: result)
            if state.startJobFailed, !failedBefore { failedJobDeadline = .now + .seconds(10) }
        case "UnitRemoved":
            // Not taken at its word: systemd removes every unit from the bus when it reloads or
            // re-executes and puts them back after. The main loop asks whether it is gone.
            if reader.string() == spec.unitName { removalToCheck = true }
        default:
            break
        }
    }

    private func propertiesChanged(_ message: OpaquePointer) {
        let reader = SDBusMessageReader(message)
        guard reader.path == unitPath, reader.string() != nil, let properties = reader.properties() else { return }
        state.propertiesChanged(properties)
        if !startTold, let mainPID = state.mainPID {
            startTold = true
            started(CommandStart(pid: Int32(clamping: mainPID), unit: spec.unitName))
        }
    }

    // MARK: The end

    /// The outcome once the unit is over; nil while it may still run. After a start job that
    /// failed, the unit's last state is waited for at most until ``failedJobDeadline``.
    private func outcomeIfOver() -> CommandOutcome? {
        let waitedEnough = failedJobDeadline.map { ContinuousClock.now >= $0 } ?? false
        guard state.isOver || waitedEnough else { return nil }
        let termination = state.termination(stopRequested: stopSent && stopRefusal == nil)
        if case .failedToStart = termination, state.startJobFailed {
            return CommandOutcome(termination: termination, duration: .zero)
        }
        if !startTold, !stopSent || stopRefusal != nil {
            startTold = true
            started(CommandStart(pid: state.mainPID.map { Int32(clamping: $0) }, unit: spec.unitName))
        }
        return CommandOutcome(termination: termination, duration: elapsed, outputTail: tail())
    }

    private func tail() -> [String] { UnitJournalTail.read(unit: spec.unitName, lines: spec.outputTailLines) }
}
