import ControlProtocol

/// The `control:` section of the config: the control socket that `eventbus tail`, `post`,
/// `status` and `modules` talk to.
public struct ControlSettings: Sendable, Equatable {
    /// A group named in the config, with the id it had when the config was read.
    public struct Group: Sendable, Equatable, CustomStringConvertible {
        public var name: String
        public var id: UInt32
        public var description: String { name }

        public init(name: String, id: UInt32) {
            self.name = name
            self.id = id
        }
    }

    /// Where the socket is (`socket`); ``ControlProtocol/defaultSocketPath(userID:runtimeDirectory:)``
    /// when the config names none.
    public var socketPath: String
    /// Members may tail, and read status and modules (`tail_group`). The socket's group, so
    /// they can connect; without it only root can.
    public var tailGroup: Group?
    /// Members may post events (`post_group`); without it only root can. They must also be able
    /// to connect: members of the tail group, or root.
    public var postGroup: Group?
    /// Events waiting for one client before more are dropped and announced (`client_buffer`).
    public var clientBuffer: Int
    /// Bytes of events (``Event/estimatedBytes``) waiting for one client before more are dropped
    /// and announced (`client_buffer_bytes`): the count alone let a client that stops reading
    /// pin 10 000 events of up to 1 MiB each.
    public var clientBufferBytes: Int
    /// Recent events kept for replay with `--since` and `--last` (`replay_events`).
    public var replayEvents: Int
    /// Bytes of recent events kept for replay (`replay_bytes`); the oldest go while the ring is
    /// over this or ``replayEvents``. Without it, 10 000 posts of 900 KB held 9 GB.
    public var replayBytes: Int

    /// Connections at once, all users together (`max_clients`); one more is refused with a
    /// `too_many_clients` error line.
    public var maxClients: Int
    /// Connections at once of one non-root user (`max_clients_per_user`): a tail-group member
    /// cannot use up the host's descriptors.
    public var maxClientsPerUser: Int
    /// Descriptors kept free for the rest of eventbusd (`reserved_files`): a client that would
    /// leave fewer is refused (see `DescriptorBudget`). Nil: 64, or a quarter of the
    /// open-files limit when that is less.
    public var reservedFiles: Int?

    /// Who decides what `tail --files` may watch (`files_access`).
    public enum FilesAccess: String, Sendable, Equatable {
        /// The client's own permissions on the path (see ``PeerAccess``): the default.
        case caller
        /// Any member of the tail group may watch any path (eventbusd's own access).
        case tailGroup = "tail_group"
    }

    public var filesAccess: FilesAccess = .caller
    /// Files and directories one `tail --files` watch may hold (`watch_entries`); a tree larger
    /// than that gets an `fs.error` and its watch stops (``FileWatch/entryLimit``). A recursive
    /// watch on `/` had taken 72 000 kernel watches and 250 MB of eventbusd.
    public var watchEntries = ControlSettings.defaultWatchEntries
    /// Groups whose members may follow the journal with `tail --journal` (`journal_groups`);
    /// root always may. Empty: every tail-group member may.
    public var journalGroups: [String] = ControlSettings.defaultJournalGroups
    /// The longest a tail that has not been handed an event holds back the saved positions past
    /// it — a journal watch consumer's, a durable import's (`hand_out_patience`; see
    /// `Bus.handOutPatience`).
    public var handOutPatience = ControlSettings.defaultHandOutPatience

    public static let defaultJournalGroups = ["systemd-journal", "adm"]
    /// 10 s (`Bus.defaultHandOutPatience`).
    public static let defaultHandOutPatience = Duration.seconds(10)
    public static let defaultClientBuffer = 10_000
    public static let defaultReplayEvents = 10_000
    /// 64 MiB: 10 000 ordinary events (a few hundred bytes to a few KiB each) fit, so for them the
    /// count still decides; of the largest events (a 1 MiB line) the last 64 are kept.
    public static let defaultReplayBytes = 64 << 20
    /// 16 MiB per client: 10 000 ordinary events fit, so the count decides for them; a client
    /// that stops reading a stream of 1 MiB events holds 16 of them. Clients tailing together
    /// share the events they hold (an event is copied by reference), so 80 stalled clients of
    /// one stream hold 16 MiB, not 1.3 GB.
    public static let defaultClientBufferBytes = 16 << 20
    /// 100 000 entries: about 30 MB of eventbusd's memory for one watch at most.
    public static let defaultWatchEntries = 100_000
    public static let defaultMaxClients = 4096
    public static let defaultMaxClientsPerUser = 64

    public init(socketPath: String = ControlProtocol.hostSocketPath(), tailGroup: Group? = nil,
                postGroup: Group? = nil, clientBuffer: Int = ControlSettings.defaultClientBuffer,
                replayEvents: Int = ControlSettings.defaultReplayEvents,
                clientBufferBytes: Int = ControlSettings.defaultClientBufferBytes,
                replayBytes: Int = ControlSettings.defaultReplayBytes,
                maxClients: Int = ControlSettings.defaultMaxClients,
                maxClientsPerUser: Int = ControlSettings.defaultMaxClientsPerUser) {
        self.socketPath = socketPath
        self.tailGroup = tailGroup
        self.postGroup = postGroup
        self.clientBuffer = clientBuffer
        self.replayEvents = replayEvents
        self.clientBufferBytes = clientBufferBytes
        self.replayBytes = replayBytes
        self.maxClients = maxClients
        self.maxClientsPerUser = maxClientsPerUser
    }
}

extension HostConfig {
    static let controlKeys = ["socket", "tail_group", "post_group", "client_buffer", "client_buffer_bytes",
                              "replay_events", "replay_bytes",
                              "max_clients", "max_clients_per_user", "reserved_files", "files_access", "watch_entries", "journal_groups",
                              "hand_out_patience"]

    /// Reads the `control:` section. Groups are looked up now, so a misspelt group is an error
    /// with its line, not a refusal later.
    static func parseControl(_ node: ConfigNode, directory: String) throws(ConfigError) -> ControlSettings {
        var settings = ControlSettings()
        for (key, value) in try node.mapping(allowed: controlKeys) {
            switch key {
            case "socket":
                let path = try value.string()
                guard !path.isEmpty else { throw value.error("must not be empty") }
                let absolute = absolute(path, relativeTo: directory)
                guard absolute.utf8.count < System.StreamSocket.maximumPathLength else {
                    throw value.error("a socket path has at most \(System.StreamSocket.maximumPathLength - 1) bytes; \(absolute) has \(absolute.utf8.count)")
                }
                settings.socketPath = absolute
            case "tail_group": settings.tailGroup = try group(value)
            case "post_group": settings.postGroup = try group(value)
            case "client_buffer": settings.clientBuffer = try value.int(atLeast: 1)
            case "client_buffer_bytes": settings.clientBufferBytes = try value.byteSize(atLeast: 1)
            case "replay_events": settings.replayEvents = try value.int(atLeast: 0)
            case "replay_bytes": settings.replayBytes = try value.byteSize(atLeast: 0)
            case "max_clients": settings.maxClients = try value.int(atLeast: 1)
            case "max_clients_per_user": settings.maxClientsPerUser = try value.int(atLeast: 1)
            case "reserved_files": settings.reservedFiles = try value.int(atLeast: 0)
            case "files_access":
                let text = try value.string()
                guard let access = ControlSettings.FilesAccess(rawValue: text) else {
                    throw value.error("must be caller (the client's own permissions decide) or tail_group (any tail-group member may watch any path), found \(text)")
                }
                settings.filesAccess = access
            case "watch_entries": settings.watchEntries = try value.int(atLeast: 1)
            case "journal_groups":
                settings.journalGroups = try value.sequence().map { item throws(ConfigError) in try item.string() }
            case "hand_out_patience":
                let patience = try value.duration()
                guard patience >= .zero else { throw value.error("must not be negative") }
                settings.handOutPatience = patience
            default: preconditionFailure("key \(key) allowed but not handled")
            }
        }
        return settings
    }

    private static func group(_ node: ConfigNode) throws(ConfigError) -> ControlSettings.Group {
        let name = try node.string()
        guard let id = System.groupID(named: name) else {
            throw node.error("no group named \"\(name)\" on this system")
        }
        return ControlSettings.Group(name: name, id: id)
    }
}
