import EventBusKit
import Foundation

/// The host's implementation of the `journal` source kind (``JournalWatch``): registers the
/// driver that makes one ``JournalSource`` per distinct watch.
///
/// ```swift
/// JournalDriver.register(on: bus, stateDirectory: "/var/lib/eventbus/journal")
/// ```
public final class JournalDriver: Sendable {
    public struct Configuration: Sendable {
        /// Where consumer positions are persisted (`<consumer>.cursor`); created (mode 0700) on
        /// the first acknowledgement.
        public var stateDirectory: String
        /// How long a reader at the end of the journal waits for inotify before looking for
        /// new entries again. Bounds the follow latency journald's batched notifications would
        /// otherwise add (docs/platform-facts.md, The journal), at the cost of that many wake-ups per second per watch.
        public var pollInterval: Duration
        /// How long a reader waits before trying again when there is no journal or reading it
        /// failed.
        public var retryInterval: Duration
        /// Where the sources list their lag while they run (the host's metrics read it); nil:
        /// nowhere.
        public var lags: JournalLags?
        /// Where the sources keep their last status while they run (the host's `status`
        /// reads it); nil: nowhere.
        public var statuses: JournalStatuses?

        public init(stateDirectory: String, pollInterval: Duration = .milliseconds(2),
                    retryInterval: Duration = .seconds(5), lags: JournalLags? = nil, statuses: JournalStatuses? = nil) {
            self.stateDirectory = stateDirectory
            self.pollInterval = pollInterval
            self.retryInterval = retryInterval
            self.lags = lags
            self.statuses = statuses
        }
    }

    /// The configuration each new source starts with.
    private let configuration: @Sendable () -> Configuration
    private let claims = JournalConsumerClaims()

    private init(configuration: @escaping @Sendable () -> Configuration) {
        self.configuration = configuration
    }

    /// Registers a driver with `configuration` as the bus's `journal` source kind.
    @discardableResult
    public static func register(on bus: Bus, configuration: Configuration) -> JournalDriver {
        register(on: bus) { configuration }
    }

    /// Registers a driver as the bus's `journal` source kind whose sources each start with
    /// what `configuration` gives when they start (the host's state directory can change).
    @discardableResult
    public static func register(on bus: Bus, configuration: @escaping @Sendable () -> Configuration) -> JournalDriver {
        let driver = JournalDriver(configuration: configuration)
        bus.registerSource(JournalWatch.self) { options, id in
            // The bus calls a driver only with options of its kind.
            JournalSource(id: id, watch: options as! JournalWatch, configuration: driver.configuration(),
                          claims: driver.claims)
        }
        return driver
    }

    /// Registers the `journal` source kind with default intervals, persisting consumer
    /// positions in `stateDirectory`.
    @discardableResult
    public static func register(on bus: Bus, stateDirectory: String) -> JournalDriver {
        register(on: bus, configuration: Configuration(stateDirectory: stateDirectory))
    }
}
