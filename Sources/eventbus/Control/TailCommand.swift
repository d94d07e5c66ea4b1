import ArgumentParser
import ControlProtocol
import Foundation
import SystemCalls

/// `eventbus tail`: follows the running host's events, like `journalctl -f`.
struct TailCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tail",
        abstract: "Follow the events of the running eventbusd.",
        discussion: """
            Patterns use NATS syntax: `*` is one token, `>` the rest (`user.>`, `fs.*`, `>`). \
            Without patterns (and without --files/--journal/--devices/--units/--dbus) every event is shown. FIELD=VALUE \
            arguments match fields as journalctl does: values of one field are alternatives, \
            different fields must all match, and both go with the patterns (the host filters); \
            a VALUE with `*` or `?` is a glob (`path=/etc/*.conf`; `\\*` is a star). A tail \
            starts with the next event, so a script waiting for one never acts on an old one; \
            -n 10 starts with the last ten, as journalctl -f does. \
            Sequence numbers (#N) are bus-wide and start at #1 with each eventbusd process (its \
            life, in `eventbus status`); `--since` takes a cursor LIFE:SEQ (what `post \
            --print-seq` prints), a bare SEQ of the running host, or a time (1h, 10min ago, \
            today, "2026-11-23 09:00", @EPOCH) and starts there if the host still holds it — \
            it says what it no longer holds. A cursor of an earlier life starts at the running \
            host's first event, with a line saying that events posted between the lives are not replayed. A tail follows until Ctrl-C, --count, --until or \
            --no-follow, also across restarts of eventbusd: a line says the host restarted, and \
            the tail goes on with every event the new host holds (events posted while no host \
            ran may be missing). A tail that does not keep up loses events, and a line says how many.
            """)

    @Argument(help: ArgumentHelp("Event name patterns, and FIELD=VALUE matches.", valueName: "pattern|field=value"))
    var arguments: [String] = []

    @Option(name: [.customShort("o"), .long], help: ArgumentHelp("short (the default: what matters, about a terminal's width), verbose (every field), json (complete), json-pretty, cat or export (Journal Export Format).", valueName: "format"))
    var output: OutputFormat?

    @Flag(help: "The same as --output json: the control protocol's event and gap lines.")
    var json = false

    @Flag(help: "Show times in UTC.")
    var utc = false

    // `.unconditional`: the next word is the value even when it starts with a dash, so
    // `--since -5m` means five minutes ago, as journalctl reads it.
    @Option(parsing: .unconditional, help: ArgumentHelp("Start at event LIFE:SEQ or SEQ (inclusive) or at a time, out of the host's replay buffer.", valueName: "cursor|time"))
    var since: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("End after event LIFE:SEQ or SEQ or at a time (exits 0).", valueName: "cursor|time"))
    var until: String?

    @Option(name: [.customShort("n"), .customLong("lines"), .customLong("last")],
            help: ArgumentHelp("Start with the last N matching events from the host's replay buffer.", valueName: "n"))
    var last: Int?

    @Flag(name: [.customShort("f"), .long], help: "Go on with live events after the replay (the default; as journalctl -f).")
    var follow = false

    @Flag(name: .customLong("no-follow"), help: "Print what the host holds (see --since, --lines) and exit.")
    var noFollow = false

    @Option(help: ArgumentHelp("Exit after N events.", valueName: "n"))
    var count: Int?

    @Option(name: .customLong("files"), help: ArgumentHelp("Also show file changes under PATH (the host opens a shared file source for it).", valueName: "path"))
    var files: [String] = []

    @Flag(help: "With --files: watch directories below PATH too.")
    var recursive = false

    @Option(name: .customLong("journal"), help: ArgumentHelp("Also show journal entries of UNIT (the host opens a shared journal source for it).", valueName: "unit"))
    var journal: [String] = []

    @Flag(help: "Also show device events (device.*: added, removed, changed…; a snapshot of what exists first), of every subsystem unless --subsystem narrows it.")
    var devices = false

    @Option(name: .customLong("subsystem"), help: ArgumentHelp("With --devices (implied): only devices of SUBSYSTEM (net, block, usb…; repeatable).", valueName: "subsystem"))
    var subsystems: [String] = []

    @Option(name: .customLong("units"), help: ArgumentHelp("Also show state changes and jobs of the systemd units matching PATTERN (a glob such as 'nginx.service' or '*.timer'): their current state first, then each transition (the host opens a shared units source).", valueName: "pattern"))
    var units: [String] = []

    @Option(name: .customLong("dbus"), help: ArgumentHelp("Also show the D-Bus signals MATCH takes, as dbus.signal events: sender=, path=, path_namespace=, interface=, member=, arg0=… (e.g. 'interface=org.freedesktop.login1.Manager,member=PrepareForSleep'), on the system bus unless bus=user or bus=ADDRESS; or preset=sleep|sessions|session-lock|network for named events (repeatable; the host opens a shared D-Bus source).", valueName: "match"))
    var dbus: [String] = []

    @Option(name: .customLong("host"), help: ArgumentHelp("Only events that came from HOST through the NATS bridge (repeatable); 'local' for this host's own.", valueName: "host"))
    var hosts: [String] = []

    @Flag(name: .customLong("exit-on-restart"), help: "End (status 1) when eventbusd stops or restarts, instead of following the new host.")
    var exitOnRestart = false

    @OptionGroup var socket: SocketOptions

    func validate() throws {
        _ = try subscribeRequest(now: Date())
    }

    func run() throws {
        var request = try subscribeRequest(now: Date())
        var host = try socket.connect()
        let format = json ? .json : (output ?? .short)
        var shown = 0
        /// The host whose stream broke, until another subscription is taken.
        var followed: (processID: Int64?, life: String?)?
        var waitingForNextHost = false
        while true {
            // Another host (a new life) numbers its events anew; the same one goes on.
            let restarted = followed.map { host.hostLife != $0.life || host.hostProcessID != $0.processID }
            if let restarted { request = resubscription(of: request, restarted: restarted, shown: shown) }
            let answer: JSON
            do {
                answer = try host.request(ControlRequest(.subscribe(request), id: "tail"))
            } catch where error is HostConnection.Restarting || error is ControlConnection.IOError {
                // A host that is shutting down takes no new subscription (or closes the
                // connection as it stops); the next one will.
                let why = error is HostConnection.Restarting ? "\(error)" : "eventbusd's connection broke (\(error))"
                guard !noFollow, !exitOnRestart, request.untilSequence == nil else { throw CommandError(why) }
                if !waitingForNextHost { notice("-- \(why); waiting for the next eventbusd --", format: format) }
                waitingForNextHost = true
                Thread.sleep(forTimeInterval: 0.25)
                host = reconnect()
                continue
            }
            waitingForNextHost = false
            let subscribed = try HostConnection.decode(answer, as: "subscribe") { if case .subscribed(let taken) = $0 { taken } else { nil } }
            if let previous = followed, let restarted {
                notice(restarted
                    ? "-- eventbusd restarted (pid \(previous.processID.map(String.init) ?? "?") → \(host.hostProcessID.map(String.init) ?? "?")): events posted while it was down may be missing --"
                    : "-- reconnected to eventbusd (pid \(host.hostProcessID.map(String.init) ?? "?")): events posted meanwhile may be missing --", format: format)
                followed = nil
            }
            if subscribed.replayIncomplete {
                printError("eventbus: the host no longer holds every event since \(since ?? "then"); its replay starts at #\(subscribed.oldestSequence)")
            }
            if subscribed.sinceEarlierLife {
                notice("-- \(since ?? "the cursor") is from an earlier eventbusd (life \(request.life ?? "?")); this one (life \(subscribed.life ?? "?")) numbers its events from #1 and the tail starts there: events posted between the two lives are not replayed --", format: format)
            }
            let gone: String
            switch try copyStream(host.connection, format: format, shown: &shown) {
            case .ended: return
            case .hostGone(let why): gone = why
            }
            // Sequence numbers start anew with a new host: a window in them cannot carry over.
            guard !noFollow, !exitOnRestart, request.untilSequence == nil else { throw CommandError(gone) }
            notice("-- \(gone); waiting for it to come back --", format: format)
            followed = (host.hostProcessID, host.hostLife)
            host = reconnect()
        }
    }

    /// The request that goes on where the stream broke: a new host's events from its first
    /// (what its replay still holds), the same host's from now; what --count left.
    private func resubscription(of request: SubscribeRequest, restarted: Bool, shown: Int) -> SubscribeRequest {
        var request = request
        request.last = nil
        request.sinceTime = nil
        request.sinceSequence = restarted ? 1 : nil
        request.life = nil  // the new connection's host counts them
        if let count { request.count = Int64(max(1, count - shown)) }
        return request
    }

    /// Waits for the host to come back, as `tail -F` waits for a file: until it does or the user
    /// gives up (Ctrl-C). Says once why it cannot connect yet.
    private func reconnect() -> HostConnection {
        var told: String?
        while true {
            do {
                return try socket.connect()
            } catch {
                let why = "\(error)"
                if told != why { printError("eventbus: waiting: \(why)") }
                told = why
                Thread.sleep(forTimeInterval: 0.25)
            }
        }
    }

    /// A line of the tail's own: on standard output between events for a person; on standard
    /// error for --json and export, whose output a program reads.
    private func notice(_ line: String, format: OutputFormat) {
        if format == .short || format == .verbose || format == .cat || format == .jsonPretty {
            var output = StandardOutput()
            output.append(line + "\n")
            output.flush()
        } else {
            printError("eventbus: \(line)")
        }
    }

    /// The `subscribe` request the options ask for; a mistake in them is a usage error.
    private func subscribeRequest(now: Date) throws -> SubscribeRequest {
        if json, let output, output != .json { throw ValidationError("--json and --output \(output.rawValue) disagree") }
        if follow && noFollow { throw ValidationError("use --follow or --no-follow, not both") }
        if since != nil && last != nil { throw ValidationError("use --since or --lines, not both") }
        if let last, last < 0 { throw ValidationError("--lines takes a count (0 or more)") }
        if let count, count < 1 { throw ValidationError("--count takes a count (1 or more)") }
        var request = SubscribeRequest()
        for argument in arguments {
            if let equals = argument.firstIndex(of: "=") {
                let field = String(argument[..<equals])
                guard !field.isEmpty else { throw ValidationError("a match is FIELD=VALUE, found \"\(argument)\"") }
                request.match[field, default: []].append(.string(String(argument[argument.index(after: equals)...])))
            } else {
                request.patterns.append(argument)
            }
        }
        do {
            switch try since.map({ try TimeSpecification.parse($0, now: now) }) {
            case .cursor(let cursor)?:
                request.sinceSequence = Int64(clamping: cursor.sequence)
                request.life = cursor.life
            case .time(let date)?: request.sinceTime = Self.microseconds(date)
            case nil: break
            }
            switch try until.map({ try TimeSpecification.parse($0, now: now) }) {
            case .cursor(let cursor)?:
                request.untilSequence = Int64(clamping: cursor.sequence)
                if let life = cursor.life {
                    if let earlier = request.life, earlier != life { throw ValidationError("--since and --until name two different host lives (\(earlier), \(life))") }
                    request.life = life
                }
            case .time(let date)?: request.untilTime = Self.microseconds(date)
            case nil: break
            }
        } catch {
            throw ValidationError("--since/--until: \(error)")
        }
        if noFollow { request.follow = false }
        request.last = last.map(Int64.init)
        request.count = count.map(Int64.init)
        // Relative to where the user typed it, not to the daemon's folder.
        if !files.isEmpty {
            let here = FileManager.default.currentDirectoryPath
            request.files = files.map { $0.hasPrefix("/") ? $0 : URL(fileURLWithPath: $0, relativeTo: URL(fileURLWithPath: here + "/")).standardizedFileURL.path }
        }
        request.recursive = recursive
        request.journal = journal
        request.devices = subsystems.isEmpty ? (devices ? ["*"] : []) : subsystems
        request.units = units
        if !dbus.isEmpty { request.sources["dbus"] = dbus }
        request.hosts = hosts
        return request
    }

    private static func microseconds(_ date: Date) -> Int64 {
        Int64(clamping: Int64((max(0, date.timeIntervalSince1970) * 1_000_000).rounded()))
    }

    /// Copies the stream to standard output until the host ends it.
    ///
    /// In `--json` mode event and gap lines are passed through byte for byte, recognized by
    /// their first bytes only — no parsing — and written in one `write` per chunk received, so
    /// the tail keeps up with the host. That their `type` comes first is part of the protocol
    /// (``EventLine``, ``GapLine``). Other lines (`end`, `error`) are decoded.
    private func copyStream(_ connection: ControlConnection, format: OutputFormat, shown: inout Int) throws -> StreamEnd {
        var output = StandardOutput()
        let formatter = EventFormatter(colour: (format == .short || format == .verbose) && EventFormatter.wantsColour(), utc: utc)
        var short = ShortLineWriter(formatter: formatter)
        var ending: String?
        var events = 0
        defer { shown += events }
        do {
            try connection.forEachLine(beforeWaiting: { output.flush() }) { line in
                if Self.starts(line, Self.eventPrefix) { events += 1 }
                if Self.starts(line, Self.eventPrefix) || Self.starts(line, Self.gapPrefix) {
                    if format == .json {
                        output.append(line)
                        output.append(0x0A)
                    } else if format == .short, short.write(line, into: &output) {
                        // written from the line's bytes
                    } else if let value = try? JSON.parse(line) {
                        output.append(format.render(value, with: formatter))
                    }
                    if output.count >= 1 << 16 { output.flush() }
                    return true
                }
                switch try ControlResponse.decode(JSON.parse(line)) {
                case .end(let reason):
                    ending = reason
                    return false
                case .error(let failure):
                    output.flush()
                    printError("eventbusd: \(failure.message)")
                default:
                    break  // a line type this tail does not know: newer hosts may add some
                }
                return true
            }
        } catch let error as ControlConnection.IOError {
            output.flush()
            return .hostGone("eventbusd's connection broke (\(error))")
        }
        output.flush()
        switch ending {
        case "count", "until": return .ended
        case "shutdown": return .hostGone("eventbusd is shutting down")
        case let reason?: throw CommandError("eventbusd ended the stream (\(reason))")
        case nil: return .hostGone("eventbusd closed the connection")
        }
    }

    private enum StreamEnd {
        /// The stream is over as asked (--count, --until, --no-follow).
        case ended
        /// The host went away: stopped, restarted or killed.
        case hostGone(String)
    }

    private static var eventPrefix: StaticString { EventLine.start }
    private static var gapPrefix: StaticString { GapLine.start }

    @inline(__always)
    private static func starts(_ line: UnsafeBufferPointer<UInt8>, _ prefix: StaticString) -> Bool {
        line.count >= prefix.utf8CodeUnitCount && memcmp(line.baseAddress!, prefix.utf8Start, prefix.utf8CodeUnitCount) == 0
    }
}

/// Standard output, buffered by hand: one `write` per batch of lines.
struct StandardOutput {
    private var buffer: [UInt8] = []

    var count: Int { buffer.count }

    mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) { buffer.append(contentsOf: bytes) }
    mutating func append(_ byte: UInt8) { buffer.append(byte) }
    mutating func append(_ bytes: [UInt8]) { buffer.append(contentsOf: bytes) }
    mutating func append(_ text: String) { buffer.append(contentsOf: text.utf8) }

    mutating func flush() {
        let failure: System.CallError? = buffer.withUnsafeBytes { bytes in
            do throws(System.CallError) { try System.writeAll(STDOUT_FILENO, bytes, path: "standard output") } catch { return error }
            return nil
        }
        if let failure { exit(failure.errno == EPIPE ? 0 : 1) }  // the reader went away (`| head`): done
        buffer.removeAll(keepingCapacity: true)
    }
}

func printError(_ message: String) {
    System.writeToStandardError(message + "\n")
}
