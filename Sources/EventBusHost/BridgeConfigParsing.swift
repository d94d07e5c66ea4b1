import EventBusKit
import Foundation
import NATSBridge
import SystemCalls

extension HostConfig {
    /// `bridge:` — for now one kind, `nats` (see ``BridgeConfig``):
    ///
    /// ```yaml
    /// bridge:
    ///   nats:
    ///     servers: [nats://10.0.0.5:4222]
    ///     host: web-1                 # default: the hostname
    ///     user: app                   # or token:, nkey: {public:, seed_file:}, creds:
    ///     password: secret
    ///     tls: {ca: ca.pem, cert: client.pem, key: client-key.pem}
    ///     export: ["deploy.>", "app.*"]
    ///     import: [">"]
    ///     export_buffer_bytes: 64MiB  # and export_buffer: 100000 (events)
    ///     pending_bytes: 64MiB        # core imports nats.c holds; and pending_limit (messages)
    ///     durable: {stream: EVENTBUS, max_age: 24h, max_bytes: 1073741824, max_msgs: 0}
    ///     # behind a leaf node: durable: {stream: EVENTBUS, js_domain: hub}
    /// ```
    static func parseBridge(_ node: ConfigNode, directory: String) throws(ConfigError) -> BridgeConfig? {
        var bridge: BridgeConfig?
        for (key, value) in try node.mapping(allowed: ["nats"]) {
            precondition(key == "nats")
            bridge = try parseNATS(value, directory: directory)
        }
        return bridge
    }

    private static let natsKeys = [
        "servers", "host", "user", "password", "token", "nkey", "creds", "tls", "export", "import",
        "subject_prefix", "export_buffer", "export_buffer_bytes", "reconnect_buffer", "pending_limit", "pending_bytes",
        "reconnect_wait", "max_reconnect_wait", "ping_interval", "max_pings_out", "write_deadline", "send_asap", "durable",
    ]

    private static func parseNATS(_ node: ConfigNode, directory: String) throws(ConfigError) -> BridgeConfig {
        let fields = try node.fields(allowed: natsKeys)
        guard let serversNode = fields["servers"] else { throw node.error("the bridge needs servers (a list of nats:// URLs)") }
        var servers: [String] = []
        for item in try serversNode.sequence() {
            let url = try item.string()
            guard url.contains("://") || !url.isEmpty, !url.contains(where: \.isWhitespace) else {
                throw item.error("expected a server URL such as nats://127.0.0.1:4222, found \"\(url)\"")
            }
            servers.append(url)
        }
        guard !servers.isEmpty else { throw serversNode.error("needs at least one server URL") }
        var host = ProcessInfo.processInfo.hostName
        if let dot = host.firstIndex(of: ".") { host = String(host[..<dot]) }
        if let hostNode = fields["host"] {
            host = try hostNode.string()
            if let problem = tokenProblem(host) { throw hostNode.error(problem) }
        } else if tokenProblem(host) != nil {
            throw node.error("the hostname \"\(host)\" cannot be a NATS subject token; set host:")
        }
        var config = BridgeConfig(servers: servers, host: host)
        config.authentication = try parseAuthentication(fields, in: node, directory: directory)
        if let tlsNode = fields["tls"] {
            let tls = try tlsNode.fields(allowed: ["ca", "cert", "key"])
            let file = { (key: String) throws(ConfigError) -> String? in
                guard let value = tls[key] else { return nil }
                return try readableFile(value, directory: directory)
            }
            config.tls = BridgeConfig.TLS(caFile: try file("ca"), certificateFile: try file("cert"), keyFile: try file("key"))
            if (tls["cert"] == nil) != (tls["key"] == nil) {
                throw tlsNode.error("a client certificate needs both cert and key")
            }
        }
        config.export = try patterns(fields["export"])
        config.import = try patterns(fields["import"])
        if config.export.isEmpty && config.import.isEmpty {
            throw node.error("the bridge neither exports nor imports anything; give export: and/or import: patterns")
        }
        if let prefix = fields["subject_prefix"] {
            config.subjectPrefix = try prefix.string()
            if let problem = tokenProblem(config.subjectPrefix) { throw prefix.error(problem) }
        }
        if let value = fields["export_buffer"] { config.exportBuffer = try value.int(atLeast: 1) }
        if let value = fields["export_buffer_bytes"] { config.exportBufferBytes = try value.byteSize(atLeast: 1) }
        if let value = fields["reconnect_buffer"] { config.reconnectBufferBytes = try value.int(atLeast: 0) }
        if let value = fields["pending_limit"] { config.pendingLimit = try value.int(atLeast: 1) }
        if let value = fields["pending_bytes"] {
            config.pendingBytes = try value.byteSize(atLeast: 1)
            // nats.c counts a subscription's pending bytes in an int.
            guard config.pendingBytes <= Int(Int32.max) else { throw value.error("must be less than 2 GiB (nats.c counts in 32 bits)") }
        }
        if let value = fields["reconnect_wait"] { config.reconnectWait = try positive(value) }
        if let value = fields["max_reconnect_wait"] { config.maxReconnectWait = try positive(value) }
        if let value = fields["ping_interval"] { config.pingInterval = try positive(value) }
        if let value = fields["max_pings_out"] { config.maxPingsOut = try value.int(atLeast: 1) }
        if let value = fields["write_deadline"] { config.writeDeadline = try value.duration() }
        if let value = fields["send_asap"] { config.sendAsap = try value.bool() }
        if config.maxReconnectWait < config.reconnectWait {
            throw (fields["max_reconnect_wait"] ?? node).error("must not be shorter than reconnect_wait")
        }
        if let durableNode = fields["durable"] { config.durable = try parseDurable(durableNode) }
        return config
    }

    private static func parseAuthentication(_ fields: [String: ConfigNode], in node: ConfigNode, directory: String) throws(ConfigError) -> BridgeConfig.Authentication {
        let given = ["user", "token", "nkey", "creds"].filter { fields[$0] != nil }
        guard given.count <= 1 else { throw node.error("give one way to authenticate, not \(given.joined(separator: " and "))") }
        if let password = fields["password"], fields["user"] == nil { throw password.error("a password needs a user") }
        if let user = fields["user"] {
            guard let password = fields["password"] else { throw user.error("a user needs a password") }
            return .userPassword(user: try user.string(), password: try password.string())
        }
        if let token = fields["token"] { return .token(try token.string()) }
        if let nkey = fields["nkey"] {
            let parts = try nkey.fields(allowed: ["public", "seed_file"])
            guard let publicKey = parts["public"], let seed = parts["seed_file"] else {
                throw nkey.error("an nkey needs public (the U… key) and seed_file")
            }
            return .nkey(publicKey: try publicKey.string(), seedFile: try readableFile(seed, directory: directory))
        }
        if let creds = fields["creds"] { return .credentials(file: try readableFile(creds, directory: directory)) }
        return .none
    }

    private static func parseDurable(_ node: ConfigNode) throws(ConfigError) -> BridgeConfig.Durable {
        var durable = BridgeConfig.Durable()
        for (key, value) in try node.mapping(allowed: ["stream", "max_age", "max_bytes", "max_msgs", "duplicate_window", "replicas", "consumer", "consumer_replicas", "ack_wait", "start", "js_domain"]) {
            switch key {
            case "stream", "consumer", "js_domain":
                let name = try value.string()
                guard !name.isEmpty, !name.contains(where: { $0 == "." || $0 == "*" || $0 == ">" || $0.isWhitespace }) else {
                    throw value.error("a JetStream name has no '.', '*', '>' or whitespace")
                }
                switch key {
                case "stream": durable.stream = name
                case "consumer": durable.consumer = name
                default: durable.domain = name
                }
            case "max_age": durable.maxAge = try value.duration()
            case "max_bytes": durable.maxBytes = Int64(try value.int(atLeast: 0))
            case "max_msgs": durable.maxMessages = Int64(try value.int(atLeast: 0))
            case "duplicate_window": durable.duplicateWindow = try positive(value)
            case "replicas": durable.replicas = try value.int(atLeast: 1)
            case "consumer_replicas":
                let replicas = try value.int(atLeast: 0)
                guard replicas <= 5 else { throw value.error("expected 0 (the stream's replicas) to 5, found \(replicas)") }
                durable.consumerReplicas = replicas
            case "ack_wait": durable.ackWait = try positive(value)
            case "start":
                switch try value.string() {
                case "new": durable.startAtBeginning = false
                case "all": durable.startAtBeginning = true
                case let other: throw value.error("expected new or all, found \"\(other)\"")
                }
            default: preconditionFailure("key \(key) allowed but not handled")
            }
        }
        return durable
    }

    private static func patterns(_ node: ConfigNode?) throws(ConfigError) -> [EventPattern] {
        guard let node else { return [] }
        var patterns: [EventPattern] = []
        for item in try node.sequence() {
            let text = try item.string()
            do { patterns.append(try EventPattern(text)) } catch { throw item.error(message(of: error)) }
        }
        return patterns
    }

    private static func positive(_ node: ConfigNode) throws(ConfigError) -> Duration {
        let duration = try node.duration()
        guard duration > .zero else { throw node.error("must be longer than 0") }
        return duration
    }

    private static func readableFile(_ node: ConfigNode, directory: String) throws(ConfigError) -> String {
        let path = absolute(try node.string(), relativeTo: directory)
        do { try System.checkAccess(path, .readable) } catch { throw node.error("cannot read \(path): \(error.reason)") }
        return path
    }

    /// Why `text` cannot be one NATS subject token, or nil if it can.
    static func tokenProblem(_ text: String) -> String? {
        if text.isEmpty { return "must not be empty" }
        if let bad = text.first(where: { $0 == "." || $0 == "*" || $0 == ">" || $0.isWhitespace }) {
            return "\"\(text)\" cannot be one NATS subject token (contains \"\(bad)\")"
        }
        return nil
    }
}
