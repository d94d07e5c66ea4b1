import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation

/// One client connection of the control socket.
///
/// ## Threads
/// Everything here runs on the server's ``ControlLoop`` thread: reading and answering requests,
/// encoding the events of its ``TailFeed`` and writing them. The bus's delivery loop only
/// offers events to the feed, which asks the loop to ``pump()`` when the session was idle. So
/// the state below needs no lock, and a client that stops reading stalls nobody: its socket is
/// simply not written until epoll says it is writable again.
///
/// ## The peer's hang-up
/// The descriptor is watched for `EPOLLRDHUP` with reading, and `EPOLLHUP`/`EPOLLERR` always —
/// also while a tail only writes and while reading is paused. A peer that closed its whole
/// connection (exited, was killed) ends the session at once: descriptor, session, feed and the
/// file or journal sources it opened are released then, not when the next matching event
/// fails to write. A peer that closed only its sending side (`shutdown(SHUT_WR)`) keeps
/// receiving its stream.
///
/// ## Output
/// Response lines and event lines share one byte buffer, written with one `send` per batch
/// (up to ``batchSize`` events and about ``batchBytes``). While the socket does not take more, the session stops taking
/// events from its feed — they wait there, bounded, and then drop with a gap line. An idle
/// connection holds no output buffer.
final class ControlSession: LoopWatcher, @unchecked Sendable {
    // @unchecked: mutable state is confined to the loop's thread.

    let id: Int
    let fd: Int32
    let peer: System.StreamSocket.Peer
    private unowned let server: ControlServer

    private static let batchSize = 1024
    /// A batch stops at the first event that reaches this many (estimated) bytes: the output
    /// buffer of a client that does not read holds about this much, not 1024 large events.
    private static let batchBytes = 256 * 1024
    private static let endingBatchSize = 64
    /// Batches written per wake-up before the loop serves other clients.
    private static let batchesPerTurn = 16

    /// Whether requests are still read (false after the peer's end of file).
    private var readOpen = true
    /// What epoll watches the descriptor for now.
    private var interest: UInt32 = 0
    private var inbound: [UInt8] = []
    private var discardingLongLine = false
    private var out = JSONWriter(capacity: 0)
    private var written = 0  // bytes of `out` already sent
    /// Events encoded into `out` since it was last empty: what a forced close loses at most.
    private var eventsInOutput = 0
    private var encoder = EventJSON()
    private var batch: [TailFeed.Item] = []
    private(set) var feed: TailFeed?
    /// Events still to send before `end` (a subscription's `count`).
    private var remaining: Int?
    /// The stream's window is over once the feed is drained (`until_*` passed, or `follow: false`).
    private var endWhenDrained = false
    private var sourceSubscriptions: [AnyCancellable] = []
    /// Event names this client posted that passed validation: a script posts a few names many
    /// times, and validating one costs more than the rest of its post (about half of the
    /// control loop's time in `post --stdin`). Bounded; emptied when full.
    private var validNames = Set<String>()
    private static let validNamesKept = 256
    /// A non-root client's recursive file watch: events under directories it may not search are
    /// not shown to it (the watch runs with eventbusd's access).
    private var filtersPaths = false
    /// The stream ends once the feed is empty: the host is shutting down and no more events come.
    private var endingReason: String?
    /// Close once the output buffer is written (after an `end` line, or after the client
    /// closed its side with nothing subscribed).
    private var closeWhenWritten = false
    private(set) var closed = false

    init(id: Int, fd: Int32, peer: System.StreamSocket.Peer, server: ControlServer) {
        self.id = id
        self.fd = fd
        self.peer = peer
        self.server = server
    }

    private var loop: ControlLoop { server.loop }

    /// Registers with the loop and greets the client. On the loop.
    func start() throws(System.CallError) {
        interest = ControlLoop.readable | ControlLoop.peerClosedWriting
        try loop.add(fd, events: interest, watcher: self)
        var may: [JSON] = []
        if server.permits(.tail, peer) { may += ["tail", "status", "modules", "stats", "metrics"] }
        if server.permits(.post, peer) { may.append("post") }
        if server.permits(.reload, peer), server.reloadHandler != nil { may.append("reload") }
        var hello: [String: JSON] = ["type": "hello", "server": "eventbusd", "may": .array(may)]
        hello["protocol"] = .int(Int64(ControlProtocol.version))
        hello["pid"] = .int(Int64(getpid()))
        hello["uid"] = .int(Int64(peer.userID))
        respond(.object(hello), id: nil)
        flush()
    }

    func ready(_ events: UInt32) {
        guard !closed else { return }
        if events & (ControlLoop.readable | ControlLoop.peerClosedWriting | ControlLoop.hangUp) != 0, readOpen,
           !outputWaiting {
            readAvailable()
            if closed { return }
        }
        if events & (ControlLoop.hangUp | ControlLoop.failed) != 0 {
            // The peer closed its whole connection (or it failed): nothing written reaches it.
            server.logger.debug("control client \(id) hung up")
            close()
            return
        }
        if events & ControlLoop.writable != 0 { pump() }
    }

    /// Ends the session from the host's side (shutdown): what its feed holds is written, then an
    /// `end` line with `reason`, then it closes. On the loop.
    func end(reason: String) {
        guard !closed, !closeWhenWritten, endingReason == nil else { return }
        if let feed {
            endingReason = reason
            server.detach(feed)
            cancelSources()
            pump()
        } else {
            finish(reason: reason)
        }
    }

    /// The shutdown's time is nearly up: what the feed still holds is not written but announced
    /// in one `gap` line (reason `shutdown`), then `end`. Returns the events given up. On the loop.
    func hurry(reason: String) -> (count: Int, first: UInt64, last: UInt64)? {
        guard !closed, let feed, endingReason != nil else { return nil }
        var given: (count: Int, first: UInt64, last: UInt64)?
        var run: (count: Int, first: UInt64, last: UInt64)?
        func announceRun() {
            guard let current = run else { return }
            out.gapLine(dropped: current.count, first: current.first, last: current.last, reason: .shutdown)
            given = given.map { ($0.count + current.count, $0.first, current.last) } ?? current
            run = nil
        }
        batch.removeAll(keepingCapacity: true)
        feed.take(upTo: .max, bytes: .max, into: &batch)
        for item in batch {
            switch item {
            case .event(let event, _):
                // A subscription's `count` bounds what it would have got, and so what it lost.
                if let left = remaining {
                    if left == 0 { break }
                    remaining = left - 1
                }
                run = run.map { ($0.count + 1, $0.first, event.sequence) } ?? (1, event.sequence, event.sequence)
            case .gap(let dropped, let first, let last, let reason):
                announceRun()
                out.gapLine(dropped: dropped, first: first, last: last, reason: reason)
            }
        }
        announceRun()
        batch.removeAll(keepingCapacity: true)
        finish(reason: reason)
        return given
    }

    /// Closes at once, whatever is unwritten; returns how many events were queued or unsent
    /// (at most: the output buffer may be partly read). On the loop.
    func forceClose() -> Int {
        guard !closed else { return 0 }
        let lost = (feed?.statistics.queued ?? 0) + (written < out.bytes.count ? eventsInOutput : 0)
        close()
        return lost
    }

    // MARK: Reading requests

    private var outputWaiting: Bool { written < out.bytes.count }

    private func readAvailable() {
        // A few reads per wake-up, so one client that floods requests does not keep the loop
        // from others (epoll reports it again while data waits).
        for _ in 0..<8 {
            if outputWaiting { break }  // reading waits until the answers are out
            let result: System.StreamSocket.ReadResult
            do {
                result = try server.readBuffer.withUnsafeMutableBytes { buffer throws(System.CallError) in
                    try System.StreamSocket.read(fd, into: buffer)
                }
            } catch {
                server.logger.debug("control client \(id): \(error)")
                close()
                return
            }
            switch result {
            case .bytes(let count):
                let previous = inbound.count
                server.readBuffer.withUnsafeBufferPointer { inbound.append(contentsOf: $0[0..<count]) }
                handleLines(scanningFrom: previous)
                if closed { return }
            case .wouldBlock:
                updateInterest()
                return
            case .end:
                readOpen = false
                inbound = []
                // Nothing subscribed: answer what was asked, then close. A subscriber may have
                // closed only its sending side; it keeps receiving (and a full hang-up still
                // shows as EPOLLHUP).
                if feed == nil { closeWhenWritten = true }
                flush()
                if !closed { updateInterest() }
                return
            }
        }
        updateInterest()
    }

    /// Watches for what the session can use now: requests while it reads and has no answers
    /// waiting; writability while output waits. Hang-ups are always reported.
    private func updateInterest() {
        guard !closed else { return }
        var wanted: UInt32 = 0
        if readOpen && !outputWaiting { wanted |= ControlLoop.readable | ControlLoop.peerClosedWriting }
        if outputWaiting { wanted |= ControlLoop.writable }
        if wanted != interest {
            interest = wanted
            loop.modify(fd, events: wanted)
        }
    }

    /// Handles every complete line in `inbound` (the new bytes start at `offset`), keeps the
    /// incomplete rest, and answers.
    private func handleLines(scanningFrom offset: Int) {
        var lineStart = 0
        var index = offset
        while let newline = inbound.withUnsafeBufferPointer({ all -> Int? in
            guard index < all.count, let found = memchr(all.baseAddress! + index, 0x0A, all.count - index) else { return nil }
            return UnsafeRawPointer(found) - UnsafeRawPointer(all.baseAddress!)
        }) {
            if discardingLongLine {
                discardingLongLine = false
            } else if newline - lineStart > ControlProtocol.maximumLineLength {
                // A whole long line can arrive in one read, before the incomplete-rest check.
                error("line_too_long", "a request line is limited to \(ControlProtocol.maximumLineLength) bytes; this one is ignored", id: nil)
            } else {
                inbound.withUnsafeBufferPointer { all in
                    handle(line: UnsafeBufferPointer(rebasing: all[lineStart..<newline]))
                }
                if closed { return }
            }
            lineStart = newline + 1
            index = lineStart
        }
        if lineStart == inbound.count {
            inbound = []  // an idle connection keeps no buffer
        } else {
            inbound.removeFirst(lineStart)
        }
        if inbound.count > ControlProtocol.maximumLineLength {
            if !discardingLongLine {
                error("line_too_long", "a request line is limited to \(ControlProtocol.maximumLineLength) bytes; this one is ignored", id: nil)
            }
            discardingLongLine = true
            inbound = []
        }
        flush()
    }

    private func handle(line: UnsafeBufferPointer<UInt8>) {
        if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { return }
        let request: JSON
        do {
            request = try JSON.parse(line)
        } catch {
            self.error("bad_json", "not JSON: \(error)", id: nil)
            return
        }
        guard case .object(let members) = request else {
            self.error("bad_request", "a request is a JSON object with an \"op\", found \(request.kindName)", id: nil)
            return
        }
        let id = members["id"]
        guard let op = members["op"]?.stringValue else {
            self.error("bad_request", "a request needs \"op\": one of subscribe, post, status, modules, stats, listing, metrics, reload", id: id)
            return
        }
        switch op {
        case "subscribe":
            guard allowed(.tail, op: op, id: id) else { return }
            subscribe(members, id: id)
        case "post":
            guard allowed(.post, op: op, id: id) else { return }
            post(members, id: id)
        case "status":
            guard allowed(.tail, op: op, id: id) else { return }
            respond(server.status(), id: id)
        case "modules":
            guard allowed(.tail, op: op, id: id) else { return }
            respond(server.modules(), id: id)
        case "stats":
            guard allowed(.tail, op: op, id: id) else { return }
            respond(server.stats(), id: id)
        case "listing":
            guard allowed(.tail, op: op, id: id) else { return }
            switch ListingRequest.answer(members, peer: peer, server: server) {
            case .success(let listing): respond(listing, id: id)
            case .failure(let failure): error(failure.code, failure.message, id: id)
            }
        case "metrics":
            guard allowed(.tail, op: op, id: id) else { return }
            respond(server.metrics(), id: id)
        case "reload":
            guard allowed(.reload, op: op, id: id) else { return }
            reload(id: id)
        default:
            self.error("unknown_op", "unknown op \"\(op)\"; expected one of subscribe, post, status, modules, stats, listing, metrics, reload", id: id)
        }
    }

    private func allowed(_ permission: ControlServer.Permission, op: String, id: JSON?) -> Bool {
        if server.permits(permission, peer) { return true }
        let reason = server.refusal(permission, peer)
        server.logger.warning("control: refused \(op) from uid \(peer.userID) (pid \(peer.processID)): \(reason)")
        error("forbidden", reason, id: id)
        return false
    }

    // MARK: Requests

    /// Answered when the reload has run (on the host's control queue, while this connection
    /// keeps being served): `reloaded` with the summary, or `reload_failed` with the config error.
    private func reload(id: JSON?) {
        guard let handler = server.reloadHandler else {
            error("unavailable", "this eventbusd cannot be reloaded through its control socket", id: id)
            return
        }
        server.logger.info("control: reload asked by uid \(peer.userID) (pid \(peer.processID))")
        handler { [self] outcome in
            loop.execute { [self] in
                guard !closed else { return }
                switch outcome {
                case .applied(let summary): respond(["type": "reloaded", "message": .string(summary)], id: id)
                case .refused(let reason): error("reload_failed", reason, id: id)
                }
                flush()
            }
        }
    }

    private func subscribe(_ request: [String: JSON], id: JSON?) {
        guard feed == nil else {
            error("already_subscribed", "this connection is already subscribed; open another one", id: id)
            return
        }
        var parsed: SubscribeRequest
        do {
            parsed = try SubscribeRequest(request, maximumBuffer: server.clientBuffer.events)
        } catch {
            self.error(error.code, error.message, id: id)
            return
        }
        // The client's own access decides what it may watch (PeerAccess), before anything opens.
        let access = server.accessSettings
        do throws(PeerAccess.Refusal) {
            if access.files == .caller {
                for path in parsed.files { try PeerAccess.checkWatch(path, by: peer) }
            }
            if !parsed.journal.isEmpty { try PeerAccess.checkJournal(by: peer, groups: access.journalGroups) }
        } catch {
            server.logger.warning("control: refused subscribe from uid \(peer.userID) (pid \(peer.processID)): \(error)")
            self.error("forbidden", error.description, id: id)
            return
        }
        for path in parsed.files {
            do throws(System.CallError) {
                _ = try System.status(of: path)
            } catch where error.isNoSuchFile {
                // As `tail -f` does: a watch on nothing would only ever print its error.
                self.error("not_found", "\(path) does not exist, so there is nothing to watch (a configured watch with rearm: true waits for a path to appear)", id: id)
                return
            } catch {}
        }
        filtersPaths = peer.userID != 0 && parsed.recursive && access.files == .caller && !parsed.files.isEmpty
        for (kind, wanted, what) in [(FileWatch.kind, !parsed.files.isEmpty, "files"), (JournalWatch.kind, !parsed.journal.isEmpty, "journal units"),
                                     (DeviceWatch.kind, !parsed.devices.isEmpty, DeviceWatch.kind), (UnitWatch.kind, !parsed.units.isEmpty, "units")]
        where wanted && !server.bus.hasSource(kind: kind) {
            error("unavailable", "this eventbusd has no \(kind) source on its bus, so it cannot follow \(what)", id: id)
            return
        }
        let loop = loop
        if !parsed.follow {
            // What the host holds now and nothing after it; the ring's newest is read below
            // under the server's lock, so take every later event as past the window.
            parsed.filter.untilSequence = min(parsed.filter.untilSequence ?? .max, server.newestSequence)
        }
        let buffer = server.clientBuffer
        let feed = TailFeed(patterns: parsed.patterns, fromSequence: parsed.since ?? 0, filter: parsed.filter,
                            capacity: parsed.buffer ?? buffer.events, byteCapacity: buffer.bytes, hosts: parsed.hosts,
                            client: (id: self.id, userID: peer.userID, processID: peer.processID),
                            wake: { [weak self] in
                                guard let session = self else { return }
                                loop.execute { session.pump() }
                            })
        let attachment = server.attach(feed, since: parsed.since, last: parsed.last)
        // The client's own sources, after the feed is in place so their first events reach it.
        var subscriptions: [AnyCancellable] = []
        do {
            let entryLimit = server.watchEntries
            for path in parsed.files {
                let watch = try FileWatch(path: path, recursive: parsed.recursive, entryLimit: entryLimit)
                subscriptions.append(try server.bus.files(watch).sink { event in
                    if feed.filter.accepts(event) { feed.offer(event, bytes: event.estimatedBytes) }
                })
            }
            // One journal reader for all the units — alternatives of one field, as
            // `.unit(a) || .unit(b)` would be — not one each: a reader is a thread and an
            // inotify instance. Clients asking for the same units share it.
            if !parsed.journal.isEmpty {
                let units = JournalMatch(terms: [["_SYSTEMD_UNIT": Set(parsed.journal)]])
                subscriptions.append(try server.bus.journal(matching: units).sink { event in
                    if feed.filter.accepts(event) { feed.offer(event, bytes: event.estimatedBytes) }
                })
            }
            // One shared monitor per subsystem (or one for all): the host's, shared with its
            // config's device watches and modules asking for the same.
            for subsystem in parsed.devices {
                subscriptions.append(try server.bus.devices(subsystem: subsystem == "*" ? nil : subsystem).sink { event in
                    if feed.filter.accepts(event) { feed.offer(event, bytes: event.estimatedBytes) }
                })
            }
            // Unit states are public (any user may list them on the system bus): no peer check.
            if !parsed.units.isEmpty {
                subscriptions.append(try server.bus.units(matching: UnitMatch(parsed.units)).sink { event in
                    if feed.filter.accepts(event) { feed.offer(event, bytes: event.estimatedBytes) }
                })
            }
        } catch {
            subscriptions.forEach { $0.cancel() }
            server.detach(feed)
            self.error("unavailable", "\((error as? EventBusError)?.message ?? "\(error)")", id: id)
            return
        }
        self.feed = feed
        self.remaining = parsed.count
        self.sourceSubscriptions = subscriptions
        var response: [String: JSON] = [
            "type": "subscribed",
            "patterns": .array(parsed.patterns.map { .string($0.description) }),
            "oldest_seq": .int(Int64(attachment.oldestSequence)),
            "newest_seq": .int(Int64(attachment.newestSequence)),
            "buffer": .int(Int64(feed.capacity)),
            "buffer_bytes": .int(Int64(feed.byteCapacity)),
        ]
        if !parsed.files.isEmpty { response["files"] = .array(parsed.files.map { .string($0) }) }
        if !parsed.journal.isEmpty { response["journal"] = .array(parsed.journal.map { .string($0) }) }
        if !parsed.devices.isEmpty { response["devices"] = .array(parsed.devices.map { .string($0) }) }
        if !parsed.units.isEmpty { response["units"] = .array(parsed.units.map { .string($0) }) }
        if let oldest = attachment.oldestTime { response["oldest_time"] = .int(Int64(oldest.timeIntervalSince1970 * 1_000_000)) }
        if attachment.replayIncomplete { response["replay_incomplete"] = .bool(true) }
        respond(.object(response), id: id)
        if parsed.filter.hasEnded(newestSequence: attachment.newestSequence, now: Date()) {
            endWhenDrained = true
        } else if let until = parsed.filter.until {
            // Nothing may be posted after `until`: the window still closes then.
            loop.after(.milliseconds(Int64(max(0, until.timeIntervalSinceNow) * 1000) + 1)) { [weak self] in
                guard let self, self.feed != nil else { return }
                self.endWhenDrained = true
                self.pump()
            }
        }
        feed.schedule()
    }

    private func post(_ request: [String: JSON], id: JSON?) {
        if let events = request["events"] {
            postBatch(events, request, id: id)
            return
        }
        let event: Event
        switch postedEvent(request) {
        case .success(let made): event = made
        case .failure(let refusal):
            error(refusal.code, refusal.message, id: id)
            return
        }
        guard let sequence = server.post(event) else {
            error("shutting_down", "the host is shutting down; the event was not posted", id: id)
            return
        }
        respond(["type": "posted", "name": .string(event.name), "seq": .int(Int64(bitPattern: sequence))], id: id)
    }

    /// `post` with `events`: one request, many events (scripts posting in bulk). The request is
    /// refused whole only when it is not a batch at all (not a list, empty, over
    /// ``ControlProtocol.maximumPostBatch``, or mixed with `name`/`fields`); otherwise each item
    /// stands alone — the good ones are posted in order, each bad one is refused by its index
    /// and takes nothing else with it. The answer has one `seqs` entry per item (null where it
    /// was refused) and, when any was, `errors` naming the indexes.
    private func postBatch(_ events: JSON, _ request: [String: JSON], id: JSON?) {
        guard case .array(let items) = events else {
            error("bad_request", "\"events\" must be a list of {\"name\", \"fields\"} objects, found \(events.kindName)", id: id)
            return
        }
        if let both = ["name", "fields"].first(where: { request[$0] != nil }) {
            error("bad_request", "a post has \"events\" or \"\(both)\", not both", id: id)
            return
        }
        guard !items.isEmpty, items.count <= ControlProtocol.maximumPostBatch else {
            error("bad_request", "\"events\" holds 1 to \(ControlProtocol.maximumPostBatch) events, found \(items.count); nothing was posted", id: id)
            return
        }
        var good: [Event] = []
        good.reserveCapacity(items.count)
        var refusals: [Int: Refusal] = [:]  // by index
        for (index, item) in items.enumerated() {
            guard case .object(let members) = item else {
                refusals[index] = Refusal(code: "bad_request", message: "an event is an object with \"name\" and \"fields\", found \(item.kindName)")
                continue
            }
            // Looked for (and sorted, for a stable message) only when there is one.
            if members.count > (members["name"] == nil ? 0 : 1) + (members["fields"] == nil ? 0 : 1),
               let unknown = members.keys.sorted().first(where: { $0 != "name" && $0 != "fields" }) {
                refusals[index] = Refusal(code: "bad_request", message: "unknown member \"\(unknown)\": an event has \"name\" and \"fields\"")
                continue
            }
            switch postedEvent(members) {
            case .success(let event): good.append(event)
            case .failure(let refusal): refusals[index] = refusal
            }
        }
        let sequences = server.post(contentsOf: good)
        // Written by hand: a batch answer is one number per event.
        out.raw("{\"type\":\"posted\",\"count\":")
        out.int(sequences.count)
        out.raw(",\"seqs\":[")
        var next = 0  // into `good` and `sequences`
        var errors: [JSON] = []
        for index in items.indices {
            if index > 0 { out.byte(UInt8(ascii: ",")) }
            var refusal = refusals[index]
            if refusal == nil {
                if next < sequences.count {
                    out.unsigned(sequences[next])
                } else {
                    // The shutdown began before this one: not posted, not acknowledged.
                    refusal = Refusal(code: "shutting_down", message: "the host is shutting down; the event was not posted")
                }
                next += 1
            }
            if let refusal {
                out.raw("null")
                errors.append(["index": .int(Int64(index)), "code": .string(refusal.code), "message": .string(refusal.message)])
            }
        }
        out.byte(UInt8(ascii: "]"))
        if !errors.isEmpty {
            out.raw(",\"errors\":")
            out.value(.array(errors))
        }
        if let id {
            out.raw(",\"id\":")
            out.value(id)
        }
        out.raw("}\n")
    }

    private struct Refusal: Error {
        var code: String
        var message: String
    }

    /// The event a `post` (or an item of its `events`) describes, posted with source `user`.
    private func postedEvent(_ request: [String: JSON]) -> Result<Event, Refusal> {
        guard let name = request["name"]?.stringValue else {
            return .failure(Refusal(code: "bad_request", message: "post needs \"name\": the event's name"))
        }
        if !validNames.contains(name) {
            do {
                try EventPattern.validate(eventName: name)
            } catch {
                return .failure(Refusal(code: "invalid_name", message: (error as? EventBusError)?.message ?? "\(error)"))
            }
            if validNames.count == Self.validNamesKept { validNames.removeAll(keepingCapacity: true) }
            validNames.insert(name)
        }
        var fields: [String: FieldValue] = [:]
        if let given = request["fields"] {
            guard case .object(let members) = given else {
                return .failure(Refusal(code: "bad_request", message: "\"fields\" must be an object, found \(given.kindName)"))
            }
            fields.reserveCapacity(members.count)
            for (key, value) in members {
                switch value {
                case .string(let text): fields[key] = .string(text)
                case .int(let number): fields[key] = .int(number)
                case .double(let number): fields[key] = .double(number)
                case .bool(let flag): fields[key] = .bool(flag)
                default:
                    return .failure(Refusal(code: "bad_request", message: "field \"\(key)\": a value is a string, number or boolean, found \(value.kindName)"))
                }
            }
        }
        return .success(Event(name: name, source: "user", fields: fields))
    }

    // MARK: Writing

    private func respond(_ response: JSON, id: JSON?) {
        var response = response
        if let id, case .object(var members) = response {
            members["id"] = id
            response = .object(members)
        }
        out.value(response)
        out.byte(0x0A)
    }

    private func error(_ code: String, _ message: String, id: JSON?) {
        respond(["type": "error", "code": .string(code), "message": .string(message)], id: id)
    }

    private func finish(reason: String) {
        respond(["type": "end", "reason": .string(reason)], id: nil)
        detachFeed()
        closeWhenWritten = true
        flush()
    }

    /// Moves events from the feed to the socket, a batch at a time, until the feed is empty or
    /// the socket is full (then epoll reports writability and this runs again). After
    /// ``batchesPerTurn`` batches it yields the loop to other clients and comes back.
    func pump() {
        guard !closed else { return }
        guard flush() else { return }
        var turns = 0
        while let feed {
            if turns == Self.batchesPerTurn {
                loop.execute { [self] in pump() }
                return
            }
            turns += 1
            batch.removeAll(keepingCapacity: true)
            // While the stream ends (shutdown), small batches: what is encoded but not yet taken
            // by the socket stays small, so a `hurry` gap line is not stuck behind much.
            feed.take(upTo: endingReason == nil ? Self.batchSize : Self.endingBatchSize, bytes: Self.batchBytes, into: &batch)
            if batch.isEmpty {
                // The feed went idle; the next offer wakes us — unless the stream is ending.
                if let endingReason { finish(reason: endingReason) } else if endWhenDrained { finish(reason: "until") }
                return
            }
            if out.bytes.capacity < 64 * 1024 { out.bytes.reserveCapacity(64 * 1024) }
            var delivered = 0
            var countReached = false
            var windowOver = false
            for item in batch {
                switch item {
                case .event(let event, _):
                    if feed.filter.endsBefore(event) {
                        windowOver = true
                        break
                    }
                    if filtersPaths, event.source.hasPrefix("files:"), case .string(let path)? = event.fields["path"],
                       !PeerAccess.mayReach(path, by: peer) {
                        continue
                    }
                    encoder.event(event, into: &out)
                    delivered += 1
                    if let left = remaining {
                        remaining = left - 1
                        if left == 1 { countReached = true }
                    }
                case .gap(let dropped, let first, let last, let reason):
                    out.gapLine(dropped: dropped, first: first, last: last, reason: reason)
                }
                if countReached || windowOver { break }
            }
            batch.removeAll(keepingCapacity: true)  // encoded: the events need not stay pinned here
            eventsInOutput += delivered
            feed.didDeliver(delivered)
            if countReached || windowOver {
                finish(reason: countReached ? "count" : "until")
                return
            }
            guard flush() else { return }
        }
    }

    /// Writes what the output buffer holds. True when all of it went out; false when the socket
    /// is full (writability is watched) or the session closed.
    @discardableResult
    private func flush() -> Bool {
        guard !closed else { return false }
        while written < out.bytes.count {
            let result: System.StreamSocket.WriteResult
            do {
                result = try out.bytes.withUnsafeBytes { all throws(System.CallError) in
                    try System.StreamSocket.write(fd, UnsafeRawBufferPointer(rebasing: all[written...]))
                }
            } catch {
                server.logger.debug("control client \(id): \(error)")
                close()
                return false
            }
            switch result {
            case .wrote(let count):
                written += count
            case .wouldBlock:
                updateInterest()
                return false
            case .closed:
                close()
                return false
            }
        }
        // A tail keeps a buffer of a batch's size; a connection that only asks keeps none.
        if feed == nil || out.bytes.capacity > 256 * 1024 {
            out = JSONWriter(capacity: 0)
        } else {
            out.bytes.removeAll(keepingCapacity: true)
        }
        written = 0
        eventsInOutput = 0
        if closeWhenWritten {
            close()
            return false
        }
        updateInterest()
        return true
    }

    private func cancelSources() {
        sourceSubscriptions.forEach { $0.cancel() }
        sourceSubscriptions = []
    }

    private func detachFeed() {
        guard let feed else { return }
        server.detach(feed)
        cancelSources()
        self.feed = nil
        batch = []
    }

    /// Releases everything at once: feed, sources, descriptor, the server's entry.
    private func close() {
        guard !closed else { return }
        closed = true
        let released = out.bytes.capacity + (feed?.statistics.queuedBytes ?? 0)
        detachFeed()
        loop.remove(fd)
        System.StreamSocket.close(fd)
        out = JSONWriter(capacity: 0)
        inbound = []
        server.remove(self, released: released)
    }
}
