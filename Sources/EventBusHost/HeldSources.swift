import EventBusKit
import Logging

/// A source the config asks the host to keep running: a timer of `sources.timers`, a watch of
/// `sources.files` or `sources.journal`.
protocol HeldSource: Hashable, Sendable {
    /// What the log calls it ("timer", "watch").
    static var noun: String { get }
    var name: String { get }
    /// The options, for the log.
    var summary: String { get }
    func publisher(on bus: Bus) throws -> EventPublisher
    /// Subscribes the host to it. The default does nothing with the events: the subscription
    /// only keeps the shared source running.
    func hold(on bus: Bus, logger: Logger) throws -> AnyCancellable
}

extension HeldSource {
    func hold(on bus: Bus, logger: Logger) throws -> AnyCancellable {
        try publisher(on: bus).sink { _ in }
    }
}

/// The sources of one kind the host holds open.
///
/// Each is the bus's own shared source, held by a host subscription: a shared source runs while
/// anyone subscribes, so the host's subscription keeps it running for everyone — modules and
/// `eventbus tail` included — whether or not a module asked for it. A module that asks for the
/// same options joins the same timer, kernel watch or journal reader instead of starting another.
///
/// Used only on ``BusHost``'s control queue.
final class HeldSources<Source: HeldSource> {
    private var running: [String: (config: Source, subscription: AnyCancellable)] = [:]
    private let bus: Bus
    private let logger: Logger

    init(bus: Bus, logger: Logger) {
        self.bus = bus
        self.logger = logger
    }

    /// Starts, stops and restarts sources so the running set matches `sources`. One that cannot
    /// be opened is logged and left out; the host runs on without it.
    func apply(_ sources: [Source]) {
        let wanted = Dictionary(uniqueKeysWithValues: sources.map { ($0.name, $0) })
        for (name, held) in running where wanted[name] != held.config {
            held.subscription.cancel()
            running[name] = nil
            logger.info("\(Source.noun) \(name) stopped (\(held.config.summary))")
        }
        for source in sources where running[source.name] == nil {
            do {
                running[source.name] = (source, try source.hold(on: bus, logger: logger))
                logger.info("\(Source.noun) \(source.name) started (\(source.summary))")
            } catch {
                logger.error("\(Source.noun) \(source.name) not started (\(source.summary)): \(error)")
            }
        }
    }

    func stopAll() {
        apply([])
    }
}

extension TimerConfig: HeldSource {
    static let noun = "timer"
    var summary: String { "\(schedule)" }

    /// Named after the config entry: its ticks say which configured timer fired (`timer=NAME`).
    func publisher(on bus: Bus) throws -> EventPublisher { bus.timer(schedule.named(name)) }
}
