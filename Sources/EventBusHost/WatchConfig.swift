import EventBusKit
import EventSources
import Logging

/// A watch of one of the `sources:` sections the source kinds declare (``SourceKinds``):
/// `sources.files`, `sources.journal`, `sources.devices`, `sources.units`…, kept running by the
/// host.
public struct WatchConfig: Sendable, Hashable {
    public var name: String
    public var source: ConfiguredSource

    public init(name: String, source: any SourceOptions) {
        self.name = name
        self.source = ConfiguredSource(source)
    }
}

extension WatchConfig: HeldSource {
    static let noun = "watch"

    /// The watch as configured. A journal watch with a `consumer` starts after that consumer's
    /// saved position when there is one, whatever its `start`: the summary says so, and the
    /// watch's `following` line (``logStatus(_:logger:)``) says where it did start.
    var summary: String {
        guard let watch = source.options as? JournalWatch, let consumer = watch.consumer else { return "\(source)" }
        return "\(source)".replacingOccurrences(of: "start=\(watch.start)", with: "start=\(consumer)'s-saved-position-else-\(watch.start)")
    }

    /// Logs a journal watch's status as it changes (the source posts each change once):
    /// following — and from where it started or resumed —, unavailable, failed.
    private func logStatus(_ event: Event, logger: Logger) {
        guard let status = event.journalStatus else { return }
        switch status.state {
        case .following: logger.info("watch \(name): \(status.reason)")
        case .unavailable: logger.warning("watch \(name): unavailable: \(status.reason)")
        case .failed: logger.error("watch \(name): failed: \(status.reason)")
        }
    }

    func publisher(on bus: Bus) throws -> EventPublisher {
        try source.publisher(on: bus)
    }

    /// A journal watch with a `consumer` is acknowledged by the host as its entries reach the
    /// bus (``JournalWatchAcknowledger``), so its position is saved even when no module
    /// acknowledges.
    func hold(on bus: Bus, logger: Logger) throws -> AnyCancellable {
        guard let options = source.options as? JournalWatch else {
            return try publisher(on: bus).sink { _ in }
        }
        guard options.consumer != nil else {
            return try bus.journal(options).sink { logStatus($0, logger: logger) }
        }
        let acknowledger = JournalWatchAcknowledger(bus: bus, watch: name, logger: logger)
        let subscription = try bus.journal(options).sink { event in
            logStatus(event, logger: logger)
            acknowledger.receive(event)
        }
        // Stopping: take no more entries, save the newest taken, then leave the source.
        return AnyCancellable {
            acknowledger.close()
            acknowledger.finish()
            subscription.cancel()
        }
    }
}
