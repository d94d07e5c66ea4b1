import EventBusKit
import Logging

/// A file or journal watch of `sources.files` / `sources.journal`, kept running by the host.
public struct WatchConfig: Sendable, Hashable {
    public enum Source: Sendable, Hashable, CustomStringConvertible {
        case files(FileWatch)
        case journal(JournalWatch)

        public var description: String {
            switch self {
            case .files(let watch): return "files \(watch)"
            case .journal(let watch): return "journal \(watch)"
            }
        }
    }

    public var name: String
    public var source: Source

    public init(name: String, source: Source) {
        self.name = name
        self.source = source
    }
}

/// The watches of `sources.files` and `sources.journal`, held open by the host like its timers
/// (see ``HostTimers``): each is the bus's shared source for those options, so its events
/// (`fs.*`, `journal.*`) reach every subscriber — modules and `eventbus tail` included — and a
/// module asking for the same options joins the same kernel watch or journal reader.
///
/// Used only on ``BusHost``'s control queue.
final class HostWatches {
    private var running: [String: (config: WatchConfig, subscription: AnyCancellable)] = [:]
    private let bus: Bus
    private let logger: Logger

    init(bus: Bus, logger: Logger) {
        self.bus = bus
        self.logger = logger
    }

    /// Starts, stops and restarts watches so the running set matches `watches`. A watch whose
    /// source cannot be opened is logged and left out; the host runs on without it.
    func apply(_ watches: [WatchConfig]) {
        let wanted = Dictionary(uniqueKeysWithValues: watches.map { ($0.name, $0) })
        for (name, watch) in running where wanted[name] != watch.config {
            watch.subscription.cancel()
            running[name] = nil
            logger.info("watch \(name) stopped (\(watch.config.source))")
        }
        for watch in watches where running[watch.name] == nil {
            do {
                let publisher: EventPublisher
                switch watch.source {
                case .files(let options): publisher = try bus.files(options)
                case .journal(let options): publisher = try bus.journal(options)
                }
                // The sink does nothing: the subscription keeps the shared source running.
                running[watch.name] = (watch, publisher.sink { _ in })
                logger.info("watch \(watch.name) started (\(watch.source))")
            } catch {
                logger.error("watch \(watch.name) not started (\(watch.source)): \(error)")
            }
        }
    }

    func stopAll() {
        apply([])
    }
}
