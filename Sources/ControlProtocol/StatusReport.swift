/// The answer to `status`: the host, its bus, sources, modules, control socket and bridge.
public struct StatusReport: Equatable, Sendable {
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
    /// Set while the host shuts down (`state` `stopping`): what it still has to do.
    public var stopping: StoppingReport?

    public struct Source: Equatable, Sendable {
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

    public struct Control: Equatable, Sendable {
        public var socket: String
        public var clients: Int64
        public var tailing: Int64
        public var replay: Replay
        public var refusedForLimit: Int64
        public var refusedForDescriptors: Int64

        public init(socket: String, clients: Int64, tailing: Int64, replay: Replay, refusedForLimit: Int64, refusedForDescriptors: Int64) {
            self.socket = socket
            self.clients = clients
            self.tailing = tailing
            self.replay = replay
            self.refusedForLimit = refusedForLimit
            self.refusedForDescriptors = refusedForDescriptors
        }
    }

    /// The replay ring: what it may hold and holds.
    public struct Replay: Equatable, Sendable {
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

    public var json: JSON {
        let replay: JSON = [
            "capacity": .int(control.replay.capacity), "held": .int(control.replay.held),
            "byte_capacity": .int(control.replay.byteCapacity), "bytes": .int(control.replay.bytes),
            "oldest_seq": .int(control.replay.oldestSequence), "newest_seq": .int(control.replay.newestSequence),
        ]
        var answer: [String: JSON] = [
            "type": "status",
            "protocol": .int(Int64(ControlProtocol.version)),
            "pid": .int(processID),
            "config": .string(configFile),
            "started": .string(started),
            "uptime_seconds": .double(uptimeSeconds),
            "posted": .int(posted),
            "subscriptions": .int(subscriptions),
            "sources": .array(sources.map { source in
                var members: [String: JSON] = ["id": .string(source.id), "subscriptions": .int(source.subscriptions)]
                if let state = source.state { members["state"] = .string(state) }
                return .object(members)
            }),
            "modules": .array(modules.map(\.json)),
            "control": ["socket": .string(control.socket), "clients": .int(control.clients),
                        "tailing": .int(control.tailing), "replay": replay,
                        "refused": ["limit": .int(control.refusedForLimit), "descriptors": .int(control.refusedForDescriptors)]],
        ]
        if let bridge { answer["bridge"] = bridge }
        if let life { answer["life"] = .string(life) }
        answer["state"] = StoppingReport.state(stopping)
        if let stopping { answer["stopping"] = stopping.json }
        return .object(answer)
    }

    init(_ members: Members) throws(ResponseDecodingError) {
        processID = try members.int("pid")
        life = members["life"]?.stringValue
        configFile = members["config"]?.stringValue ?? "?"
        started = members["started"]?.stringValue ?? "?"
        uptimeSeconds = members["uptime_seconds"]?.doubleValue ?? 0
        posted = members["posted"]?.intValue ?? 0
        subscriptions = members["subscriptions"]?.intValue ?? 0
        sources = (members["sources"]?.arrayValue ?? []).map { source in
            Source(id: source["id"]?.stringValue ?? "?", subscriptions: source["subscriptions"]?.intValue ?? 0,
                   state: source["state"]?.stringValue)
        }
        modules = try (members["modules"]?.arrayValue ?? []).map { (module) throws(ResponseDecodingError) in try ModuleReport(module) }
        let control = members["control"]
        let replay = control?["replay"]
        func number(_ value: JSON?) -> Int64 { value?.intValue ?? 0 }
        self.control = Control(
            socket: control?["socket"]?.stringValue ?? "?", clients: number(control?["clients"]), tailing: number(control?["tailing"]),
            replay: Replay(capacity: number(replay?["capacity"]), held: number(replay?["held"]),
                           byteCapacity: number(replay?["byte_capacity"]), bytes: number(replay?["bytes"]),
                           oldestSequence: number(replay?["oldest_seq"]), newestSequence: number(replay?["newest_seq"])),
            refusedForLimit: number(control?["refused"]?["limit"]), refusedForDescriptors: number(control?["refused"]?["descriptors"]))
        bridge = members["bridge"]
        stopping = StoppingReport(members)
    }
}

/// One module, in `status` and `modules`.
public struct ModuleReport: Equatable, Sendable {
    public var name: String
    public var path: String
    /// `starting`, `active`, `disabled`, `stopped`, `restarting`, `stalled` (an exec module's
    /// program does not read its input) or `failed` (with ``reason``).
    public var state: String
    public var reason: String?
    public var delivered: Int64
    public var dropped: Int64
    public var queued: Int64
    public var queuedBytes: Int64
    public var errors: Int64
    public var reportedName: String?
    public var version: String?
    /// `none`, `process` or `exec` (a program in any language, run as a worker is).
    public var isolation: String
    public var restarts: Int64
    /// The worker's pid, for an isolated module that runs.
    public var workerProcessID: Int64?
    public var lastCrash: String?
    /// RFC 3339.
    public var lastCrashTime: String?
    /// A reloaded config the module refused: it runs on its previous one.
    public var configNotApplied: String?

    public init(name: String, path: String, state: String, reason: String? = nil, delivered: Int64, dropped: Int64,
                queued: Int64, queuedBytes: Int64, errors: Int64, reportedName: String? = nil, version: String? = nil,
                isolation: String, restarts: Int64, workerProcessID: Int64? = nil, lastCrash: String? = nil,
                lastCrashTime: String? = nil, configNotApplied: String? = nil) {
        self.name = name
        self.path = path
        self.state = state
        self.reason = reason
        self.delivered = delivered
        self.dropped = dropped
        self.queued = queued
        self.queuedBytes = queuedBytes
        self.errors = errors
        self.reportedName = reportedName
        self.version = version
        self.isolation = isolation
        self.restarts = restarts
        self.workerProcessID = workerProcessID
        self.lastCrash = lastCrash
        self.lastCrashTime = lastCrashTime
        self.configNotApplied = configNotApplied
    }

    public var json: JSON {
        var object: [String: JSON] = [
            "name": .string(name), "path": .string(path), "state": .string(state),
            "delivered": .int(delivered), "dropped": .int(dropped), "queued": .int(queued),
            "queued_bytes": .int(queuedBytes), "errors": .int(errors),
            "isolation": .string(isolation), "restarts": .int(restarts),
        ]
        if let reason { object["reason"] = .string(reason) }
        if let reportedName { object["reported_name"] = .string(reportedName) }
        if let version { object["version"] = .string(version) }
        if let workerProcessID { object["pid"] = .int(workerProcessID) }
        if let lastCrash { object["last_crash"] = .string(lastCrash) }
        if let configNotApplied { object["config_not_applied"] = .string(configNotApplied) }
        if let lastCrashTime { object["last_crash_time"] = .string(lastCrashTime) }
        return .object(object)
    }

    init(_ json: JSON) throws(ResponseDecodingError) {
        let members = try Members(json, type: "module")
        name = try members.string("name")
        path = members["path"]?.stringValue ?? "?"
        state = members["state"]?.stringValue ?? "?"
        reason = members["reason"]?.stringValue
        delivered = members["delivered"]?.intValue ?? 0
        dropped = members["dropped"]?.intValue ?? 0
        queued = members["queued"]?.intValue ?? 0
        queuedBytes = members["queued_bytes"]?.intValue ?? 0
        errors = members["errors"]?.intValue ?? 0
        reportedName = members["reported_name"]?.stringValue
        version = members["version"]?.stringValue
        isolation = members["isolation"]?.stringValue ?? "none"
        restarts = members["restarts"]?.intValue ?? 0
        workerProcessID = members["pid"]?.intValue
        lastCrash = members["last_crash"]?.stringValue
        lastCrashTime = members["last_crash_time"]?.stringValue
        configNotApplied = members["config_not_applied"]?.stringValue
    }
}
