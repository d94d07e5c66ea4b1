import EventBusKit

/// What `bridge.nats` in the host's config says: which servers, how to authenticate, which events
/// leave this host and which come in. A plain value; the host's config loader fills it in and
/// checks it (with file, line and key in every error), the bridge acts on it.
public struct BridgeConfig: Sendable, Equatable {
    /// Server URLs (`nats://host:4222`, `tls://…`); the client picks one and fails over.
    public var servers: [String]
    /// This host's id in subjects and origins: one NATS token (no `.`, `*`, `>` or whitespace).
    public var host: String
    public var authentication: Authentication = .none
    public var tls: TLS?
    /// Local events whose names match one of these are published (`export`).
    public var export: [EventPattern] = []
    /// Remote events whose names match one of these are posted on the local bus (`import`).
    public var `import`: [EventPattern] = []
    /// The first token of every subject (`subject_prefix`, default `eventbus`).
    public var subjectPrefix = "eventbus"
    /// Events waiting to leave the host (`export_buffer`). In core mode they wait only while the
    /// publisher is busy; in durable mode also while NATS is unreachable. Past this, new events
    /// are dropped, counted and announced as `bridge.gap` (kind `export_overflow`).
    public var exportBuffer = 100_000
    /// Estimated bytes (``Event/estimatedBytes``) of the events the bridge holds on their way
    /// out (`export_buffer_bytes`, 64 MiB): waiting in the export buffer, being published, and
    /// in durable mode published but not yet acknowledged or waiting to be published again.
    /// Past this, new events are dropped and announced as `export_overflow`, as past
    /// `exportBuffer`. An event larger than the whole bound still goes when the bridge holds no
    /// other export, so no event is too large to be exported at all.
    public var exportBufferBytes = 64 << 20
    /// Bytes nats.c keeps for publishes while reconnecting (`reconnect_buffer`), core mode.
    public var reconnectBufferBytes = 8 * 1024 * 1024
    /// Messages a core import subscription holds not yet posted, in its origin queues
    /// (`pending_limit`); past it, or past `pending_bytes`, the newest message of the origin
    /// holding the most is dropped, announced as `over_share` against that origin.
    public var pendingLimit = 65_536
    /// Bytes of those messages (`pending_bytes`, 64 MiB; at most 2 GiB − 1, as nats.c counts in
    /// 32 bits). nats.c's hand-off queue in front holds at most the larger of these two and
    /// 65 536 messages / 64 MiB (``CoreImporter/handOffLimit``).
    public var pendingBytes = 64 << 20
    /// First and largest wait between reconnect attempts (`reconnect_wait`, `max_reconnect_wait`);
    /// the wait doubles per failed attempt in between, ±20 % jitter. The largest is what a host
    /// waits at most, after a long outage, once its server is back: 1 s (at most 1.2 s with
    /// the jitter) keeps imports flowing again within 2 s of the server's return, at the cost of
    /// one refused connection a second per host while it is away.
    public var reconnectWait: Duration = .milliseconds(100)
    public var maxReconnectWait: Duration = .seconds(1)
    /// How often the client pings the server, and after how many unanswered pings it declares
    /// the connection stale (`ping_interval`, `max_pings_out`).
    public var pingInterval: Duration = .seconds(20)
    public var maxPingsOut = 2
    /// How long one write to the server may take (nats.c's write deadline; 0: none, nats.c's
    /// default). A server that hangs — frozen, or behind a link that black-holes — keeps the TCP
    /// connection open and stops reading: once the socket's send buffer is full (a few MB), a
    /// write without a deadline waits for good, holding nats.c's connection lock, and the
    /// connection is never found dead (the pings wait for the same lock). With it the write
    /// fails, nats.c drops the connection and reconnects (to another server, if one is listed).
    /// 2 s: a live server on any link that carries the bridge's traffic takes a write (nats.c's
    /// 32 KiB buffer, or one large event) far sooner, so only a hung one reaches it; and it bounds
    /// how long the exporter, and a host stopping, waits on a hung server.
    public var writeDeadline: Duration = .seconds(2)
    /// Whether nats.c writes each publish at once instead of letting its flusher thread gather
    /// them (`send_asap`): lower latency at low rates (the flusher's gathering is most of the
    /// p50), a write per event at high rates.
    public var sendAsap = false
    /// JetStream (`durable:`); nil: core NATS, at-most-once.
    public var durable: Durable?

    public init(servers: [String], host: String) {
        self.servers = servers
        self.host = host
    }

    public enum Authentication: Sendable, Equatable {
        case none
        case userPassword(user: String, password: String)
        case token(String)
        /// An NKey: the public key and the file holding its seed.
        case nkey(publicKey: String, seedFile: String)
        /// A `.creds` file (JWT + seed), as `nsc` writes them.
        case credentials(file: String)
    }

    public struct TLS: Sendable, Equatable {
        /// PEM file of the CAs to trust; nil: the system's.
        public var caFile: String?
        /// Client certificate and key (PEM), for servers that verify clients.
        public var certificateFile: String?
        public var keyFile: String?

        public init(caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil) {
            self.caFile = caFile
            self.certificateFile = certificateFile
            self.keyFile = keyFile
        }
    }

    /// Durable mode: exports are stored in a JetStream stream, each host imports through its own
    /// durable consumer.
    public struct Durable: Sendable, Equatable {
        /// The stream every host publishes to (`stream`, default `EVENTBUS`); created with the
        /// limits below if missing, checked (subjects) if present.
        public var stream = "EVENTBUS"
        /// Stream limits: 0 means none.
        public var maxAge: Duration = .seconds(86_400)
        public var maxBytes: Int64 = 1 << 30
        public var maxMessages: Int64 = 0
        /// How long the server remembers message ids to drop re-published duplicates.
        public var duplicateWindow: Duration = .seconds(120)
        public var replicas = 1
        /// Replicas of this host's consumer (`consumer_replicas`, default 1; 0: the stream's).
        /// One is enough: the host re-creates its consumer from its own position file at every
        /// start and reconnect, so a consumer lost with its server loses nothing, and a
        /// replicated consumer is a Raft group of its own — per host, the cost that grows in a
        /// cluster, and an election to wait for after a server death.
        public var consumerReplicas = 1
        /// This host's consumer (`consumer`, default `eventbus-<host>`).
        public var consumer: String?
        /// How long the server waits for an acknowledgement before it delivers again.
        public var ackWait: Duration = .seconds(30)
        /// Where a host with no recorded position starts: `new` events only, or `all` the
        /// stream holds.
        public var startAtBeginning = false
        /// The JetStream domain that holds the stream (`js_domain`), for hosts connected to a
        /// leaf node: their JetStream API requests go to `$JS.<domain>.API.>`, which the leaf
        /// forwards to the hub whose `jetstream { domain: … }` it names. Nil: the API of the
        /// account the host is connected to.
        public var domain: String?
        /// How long an imported event waits for its origin's earlier one (``OriginOrder``). Not
        /// a configuration key: tests lengthen it, so that a machine too busy to look within a
        /// minute does not end the hold they examine.
        var holdPatience = OriginOrder<Event?>.defaultPatience

        public init() {}
    }
}
