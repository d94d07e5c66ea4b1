/// The answer to `status`: the host, its bus, sources, modules, control socket and bridge.
public struct StatusReport: CodableAnswer, Equatable {
    public static let type = "status"

    /// The control protocol's version (``ControlProtocol/version``).
    public var protocolVersion = Int64(ControlProtocol.version)
    public var processID: Int64
    /// The host's life (``EventCursor``); nil from a host older than lives.
    public var life: String?
    public var configFile: String
    /// When the host started, RFC 3339.
    public var started: String
    public var uptimeSeconds: Double
    public var posted: Int64
    public var subscriptions: Int64
    public var sources: [Source]
    public var modules: [ModuleReport]
    public var control: Control
    /// The NATS bridge's state and counts, when one runs (its members are the bridge's own).
    public var bridge: JSON?
    /// `stopping` while the host shuts down: set with ``stopping``.
    public private(set) var state = HostState.running
    /// Set while the host shuts down: what it still has to do.
    public var stopping: StoppingReport? {
        didSet { state = HostState(stopping) }
    }

    public struct Source: Codable, Equatable, Sendable {
        public var id: String
        public var subscriptions: Int64
        /// What a running source says of itself (a journal watch: following, or why not).
        public var state: String?

        public init(id: String, subscriptions: Int64, state: String? = nil) {
            self.id = id
            self.subscriptions = subscriptions
            self.state = state
        }
    }

    public struct Control: Codable, Equatable, Sendable {
        public var socket: String
        public var clients: Int64
        public var tailing: Int64
        public var replay: Replay
        public var refused: Refused

        public init(socket: String, clients: Int64, tailing: Int64, replay: Replay, refusedForLimit: Int64, refusedForDescriptors: Int64) {
            self.socket = socket
            self.clients = clients
            self.tailing = tailing
            self.replay = replay
            refused = Refused(limit: refusedForLimit, descriptors: refusedForDescriptors)
        }
    }

    /// Connections turned away since start: over a client limit, and for want of descriptors.
    public struct Refused: Codable, Equatable, Sendable {
        public var limit: Int64
        public var descriptors: Int64
    }

    /// The replay ring: what it may hold and holds.
    public struct Replay: Codable, Equatable, Sendable {
        public var capacity: Int64
        public var held: Int64
        public var byteCapacity: Int64
        public var bytes: Int64
        public var oldestSequence: Int64
        public var newestSequence: Int64

        public init(capacity: Int64, held: Int64, byteCapacity: Int64, bytes: Int64, oldestSequence: Int64, newestSequence: Int64) {
            self.capacity = capacity
            self.held = held
            self.byteCapacity = byteCapacity
            self.bytes = bytes
            self.oldestSequence = oldestSequence
            self.newestSequence = newestSequence
        }

        enum CodingKeys: String, CodingKey {
            case capacity, held, bytes
            case byteCapacity = "byte_capacity"
            case oldestSequence = "oldest_seq"
            case newestSequence = "newest_seq"
        }
    }

    public init(processID: Int64, configFile: String, started: String, uptimeSeconds: Double, posted: Int64,
                subscriptions: Int64, sources: [Source], modules: [ModuleReport], control: Control, bridge: JSON?) {
        self.processID = processID
        self.configFile = configFile
        self.started = started
        self.uptimeSeconds = uptimeSeconds
        self.posted = posted
        self.subscriptions = subscriptions
        self.sources = sources
        self.modules = modules
        self.control = control
        self.bridge = bridge
    }

    enum CodingKeys: String, CodingKey {
        case life, started, posted, subscriptions, sources, modules, control, bridge, state, stopping
        case protocolVersion = "protocol"
        case processID = "pid"
        case configFile = "config"
        case uptimeSeconds = "uptime_seconds"
    }
}
