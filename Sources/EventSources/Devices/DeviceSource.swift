import CSystemd
import EventBusKit
import Foundation
import Glibc
import Synchronization
import SystemCalls

/// The shared source behind every subscription to one ``DeviceWatch``: one netlink socket
/// (libsystemd's `sd_device_monitor`) and one thread, started with the first subscriber and
/// closed after the last one leaves.
///
/// ## Threads
/// - `start`, `stop` and `subscriberJoined` run on whatever thread subscribes or cancels.
/// - The source's *monitor thread* owns everything else: the monitor, the `sd_event` loop it is
///   attached to, the listings (`sd_device_enumerator`) and the ``DeviceTracker``. It posts every
///   event itself, so subscribers without a mailbox are called on it (or on the thread running
///   the bus's delivery loop at the time); modules get their events on their mailbox.
/// - A subscriber who joins is told what exists by the thread, to it alone; the first listing
///   goes to the subscriber that started the source.
/// - `stop` and `subscriberJoined` reach the thread through an pipe its loop watches.
///
/// ## Which messages
/// libsystemd 252's `sd_device_monitor_new` binds udev's netlink group (2); its
/// `device_monitor_new_full`, which takes the group, is not exported. For the kernel layer the
/// monitor's socket leaves group 2 and joins the kernel's group 1 (`NETLINK_DROP_MEMBERSHIP`,
/// `NETLINK_ADD_MEMBERSHIP`) once started: libsystemd parses both kinds of message and filters
/// kernel ones by subsystem in user space. The socket belongs to the network namespace of the
/// thread that made it: net devices' uevents are per namespace.
///
/// ## Loss
/// When the socket's receive buffer is full the kernel drops messages and fails the next read
/// with `ENOBUFS` — which `sd_device_monitor`'s handler swallows. The kernel also counts every
/// dropped message on the socket (`SO_MEMINFO`'s drop count); the thread reads that count after
/// each message it handles. When it grew: `devices.gap`, a new listing, the difference as
/// `device.added`/`removed` with origin rescan, then `devices.rescanned`.
final class DeviceSource: EventSource, GreetsJoiningSubscribers, @unchecked Sendable {
    let id: String
    private let watch: DeviceWatch
    private let configuration: DeviceSources.Configuration
    /// Signalled by `stop` and `subscriberJoined` to wake the monitor thread, whose loop watches
    /// it; nil when none could be made (the source then says so at start).
    private let wakeUp: Result<System.WakeUp, System.CallError>
    private let stopping = Atomic<Bool>(false)
    /// Subscribers who joined and wait for their snapshot (see ``subscriberJoined(_:)``).
    private let greetings = Mutex<[SubscriberGreeting]>([])
    private let exited = DispatchSemaphore(value: 0)

    private enum Phase {
        case idle
        case running(pthread_t)
        case stopped
    }
    private let phase = Mutex<Phase>(.idle)

    init(id: String, watch: DeviceWatch, configuration: DeviceSources.Configuration) {
        self.id = id
        self.watch = watch
        self.configuration = configuration
        wakeUp = Result { () throws(System.CallError) in try System.WakeUp() }
    }

    func start(posting bus: Bus) {
        phase.withLock { phase in
            // The bus may stop a source before starting it when its only subscriber cancels at once.
            guard case .idle = phase else { return }
            if case .failure(let error) = wakeUp {
                phase = .stopped
                announce(DeviceNotice(kind: .error, message: "cannot make the monitor thread's wake-up: \(error.reason)")
                    .event(source: id), on: bus)
                return
            }
            switch startDetachedThread({ self.run(bus: bus) }) {
            case .success(let thread):
                phase = .running(thread)
            case .failure(let error):
                phase = .stopped
                announce(DeviceNotice(kind: .error, message: "cannot start a monitor thread: \(error.reason)")
                    .event(source: id), on: bus)
            }
        }
    }

    /// Returns once the monitor thread has posted its last event and closed its socket — except
    /// when called *on* that thread (a subscriber cancelling inside its delivery), where waiting
    /// would deadlock: the thread then posts nothing more and ends on its own.
    func stop() {
        let thread: pthread_t? = phase.withLock { phase in
            defer { phase = .stopped }
            if case .running(let thread) = phase { return thread }
            return nil
        }
        stopping.store(true, ordering: .releasing)
        wake()
        guard let thread, pthread_equal(thread, pthread_self()) == 0 else { return }
        exited.wait()
    }

    /// The monitor thread posts the devices it knows of (`devices.status`, origin snapshot, then
    /// `devices.snapshot`) to the joiner alone, between two of its messages, so the joiner's
    /// picture is consistent with what follows. A join before the first listing is greeted
    /// right after it.
    func subscriberJoined(_ greeting: SubscriberGreeting) {
        greetings.withLock { $0.append(greeting) }
        wake()
    }

    private func wake() {
        if case .success(let wakeUp) = wakeUp { wakeUp.signal() }
    }

    private var isStopping: Bool { stopping.load(ordering: .acquiring) }

    // MARK: The monitor thread

    private func run(bus: Bus) {
        defer { exited.signal() }
        Thread.current.name = "device-monitor"  // the OS thread name: what `top -H` and perf show
        let layer: DeviceLayer
        switch watch.layer {
        case .udev: layer = .udev
        case .kernel: layer = .kernel
        case .automatic: layer = System.isAccessible(configuration.udevControlPath) ? .udev : .kernel
        }
        let loop: MonitorLoop
        do throws(MonitorLoop.Failure) {
            loop = try MonitorLoop(watch: watch, layer: layer, configuration: configuration,
                                   wakeDescriptor: try! wakeUp.get().descriptor, source: id, bus: bus)
        } catch {
            announce(DeviceNotice(kind: .error, message: error.message, layer: layer, errorNumber: error.errorNumber)
                .event(source: id), on: bus)
            return
        }
        defer { loop.close() }
        // The first listing goes to the subscriber that started the source; everyone who joined
        // — before it, while it is posted, later — gets a snapshot of their own, between two
        // messages: the bus keeps what is posted to everyone from a joiner until its greeting
        // is complete, so each subscriber gets exactly one snapshot, and what follows it.
        loop.postStatusAndSnapshot()
        while !isStopping {
            for greeting in takeGreetings() { loop.postSnapshot(to: greeting) }
            guard loop.runOnce() else { return }
            if isStopping { return }
            loop.checkForLoss()
        }
    }

    /// The watch cannot run: `failure` to everyone, and as their greeting to those who joined so
    /// far (they take nothing posted to everyone before it).
    private func announce(_ failure: Event, on bus: Bus) {
        bus.post(failure)
        for greeting in takeGreetings() { greeting.post(contentsOf: [failure]) }
    }

    private func takeGreetings() -> [SubscriberGreeting] {
        greetings.withLock { waiting in
            defer { waiting.removeAll() }
            return waiting
        }
    }
}
