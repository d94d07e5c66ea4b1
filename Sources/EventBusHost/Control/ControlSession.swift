import ControlProtocol
import Dispatch
import EventBusKit
import Foundation

/// One client connection of the control socket.
///
/// ## Threads
/// Everything here runs on ``queue``, the session's own serial queue: reading and answering
/// requests (Dispatch read source), writing (Dispatch write source, armed only while the socket's
/// kernel buffer is full), and encoding the events of its ``TailFeed``. The bus's delivery loop
/// only offers events to the feed, which wakes this queue when it was idle. So the state below
/// needs no lock, and a client that stops reading stalls nobody but itself.
///
/// ## Output
/// Response lines and event lines share one byte buffer, written with one `send` per batch
/// (up to ``batchSize`` events). While the socket does not take more, the session stops taking
/// events from its feed — they wait there, bounded, and then drop with a gap line.
final class ControlSession: @unchecked Sendable {
    // @unchecked: mutable state is confined to `queue`.

    let id: Int
    let fd: Int32
    let peer: System.StreamSocket.Peer
    let queue: DispatchQueue
    private let server: ControlServer
    private let readSource: DispatchSourceRead
    private let writeSource: DispatchSourceWrite

    private static let batchSize = 1024
    private static let readSize = 64 * 1024

    private var writeArmed = false
    private var readOpen = true
    /// Reading stops while output waits for the socket: a client that sends requests without
    /// reading the answers cannot make the host buffer answers without bound.
    private var readPaused = false
    private var openSources = 2  // read and write sources not yet cancelled; the fd closes at 0
    private var readBuffer = [UInt8](repeating: 0, count: ControlSession.readSize)
    private var inbound: [UInt8] = []
    private var discardingLongLine = false
    private var out = JSONWriter(capacity: 64 * 1024)
    private var written = 0  // bytes of `out` already sent
    private var encoder = EventJSON()
    private var batch: [TailFeed.Item] = []
    private var feed: TailFeed?
    /// Events still to send before `end` (a subscription's `count`).
    private var remaining: Int?
    private var sourceSubscriptions: [AnyCancellable] = []
    /// Close once the output buffer is written (after an `end` line, or after the client
    /// closed its side with nothing subscribed).
    private var closeWhenWritten = false
    private var closed = false

    init(id: Int, fd: Int32, peer: System.StreamSocket.Peer, server: ControlServer) {
        self.id = id
        self.fd = fd
        self.peer = peer
        self.server = server
        self.queue = DispatchQueue(label: "eventbus.control.client.\(id)")
        self.readSource = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        self.writeSource = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
    }

    /// Greets the client and starts reading its requests.
    func start() {
        readSource.setEventHandler { [unowned self] in self.readAvailable() }
        readSource.setCancelHandler { [unowned self] in self.sourceCancelled() }
        writeSource.setEventHandler { [unowned self] in
            self.writeArmed = false
            self.writeSource.suspend()
            self.pump()
        }
        writeSource.setCancelHandler { [unowned self] in self.sourceCancelled() }
        queue.async { [self] in
            var may: [JSON] = []
            if server.permits(.tail, peer) { may += ["tail", "status", "modules", "stats"] }
            if server.permits(.post, peer) { may.append("post") }
            var hello: [String: JSON] = ["type": "hello", "server": "eventbusd", "may": .array(may)]
            hello["protocol"] = .int(Int64(ControlProtocol.version))
            hello["pid"] = .int(Int64(getpid()))
            hello["uid"] = .int(Int64(peer.userID))
            respond(.object(hello), id: nil)
            flush()
            readSource.resume()
        }
    }

    /// Ends the session from the host's side: an `end` line with `reason`, then close once it is
    /// written.
    func end(reason: String) {
        queue.async { [self] in
            guard !closed, !closeWhenWritten else { return }
            finish(reason: reason)
        }
    }

    /// Closes at once, whatever is unwritten.
    func forceClose() {
        queue.async { [self] in close() }
    }

    // MARK: Reading requests

    private func readAvailable() {
        guard readOpen else { return }
        // A few reads per wake-up, so one client that floods requests does not keep this queue
        // from writing (the read source fires again while data waits).
        for _ in 0..<8 {
            if written < out.bytes.count {
                readPaused = true
                readSource.suspend()  // resumed by flush() once the output is out
                return
            }
            let result: System.StreamSocket.ReadResult
            do {
                result = try readBuffer.withUnsafeMutableBytes { buffer throws(System.CallError) in
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
                inbound.append(contentsOf: readBuffer[0..<count])
                handleLines(scanningFrom: previous)
                if closed { return }
            case .wouldBlock:
                return
            case .end:
                readOpen = false
                readSource.cancel()
                // Nothing subscribed: answer what was asked, then close. A subscriber may have
                // closed only its sending side; it keeps receiving.
                if feed == nil { closeWhenWritten = true }
                flush()
                return
            }
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
            } else {
                inbound.withUnsafeBufferPointer { all in
                    handle(line: UnsafeBufferPointer(rebasing: all[lineStart..<newline]))
                }
                if closed { return }
            }
            lineStart = newline + 1
            index = lineStart
        }
        inbound.removeFirst(lineStart)
        if inbound.count > ControlProtocol.maximumLineLength {
            if !discardingLongLine {
                error("line_too_long", "a request line is limited to \(ControlProtocol.maximumLineLength) bytes; this one is ignored", id: nil)
            }
            discardingLongLine = true
            inbound.removeAll()
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
            self.error("bad_request", "a request needs \"op\": one of subscribe, post, status, modules, stats", id: id)
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
        default:
            self.error("unknown_op", "unknown op \"\(op)\"; expected one of subscribe, post, status, modules, stats", id: id)
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

    private func subscribe(_ request: [String: JSON], id: JSON?) {
        guard feed == nil else {
            error("already_subscribed", "this connection is already subscribed; open another one", id: id)
            return
        }
        let parsed: SubscribeRequest
        do {
            parsed = try SubscribeRequest(request, maximumBuffer: server.clientBuffer)
        } catch {
            self.error(error.code, error.message, id: id)
            return
        }
        for (kind, wanted) in [(FileWatch.kind, !parsed.files.isEmpty), (JournalWatch.kind, !parsed.journal.isEmpty)]
        where wanted && !server.bus.hasSource(kind: kind) {
            error("unavailable", "this eventbusd has no \(kind) source on its bus, so it cannot follow \(kind == FileWatch.kind ? "files" : "journal units")", id: id)
            return
        }
        let queue = queue
        let feed = TailFeed(patterns: parsed.patterns, fromSequence: parsed.since ?? 0,
                            capacity: parsed.buffer ?? server.clientBuffer, hosts: parsed.hosts,
                            client: (id: self.id, userID: peer.userID, processID: peer.processID),
                            wake: { [weak self] in
                                if let self { queue.async { self.pump() } }
                            })
        let attachment = server.attach(feed, since: parsed.since, last: parsed.last)
        // The client's own sources, after the feed is in place so their first events reach it.
        var subscriptions: [AnyCancellable] = []
        do {
            for path in parsed.files {
                subscriptions.append(try server.bus.files(at: path, recursive: parsed.recursive).sink { feed.offer($0) })
            }
            for unit in parsed.journal {
                subscriptions.append(try server.bus.journal(matching: .unit(unit)).sink { feed.offer($0) })
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
        ]
        if !parsed.files.isEmpty { response["files"] = .array(parsed.files.map { .string($0) }) }
        if !parsed.journal.isEmpty { response["journal"] = .array(parsed.journal.map { .string($0) }) }
        respond(.object(response), id: id)
        feed.schedule()
    }

    private func post(_ request: [String: JSON], id: JSON?) {
        guard let name = request["name"]?.stringValue else {
            error("bad_request", "post needs \"name\": the event's name", id: id)
            return
        }
        do {
            try EventPattern.validate(eventName: name)
        } catch {
            self.error("invalid_name", (error as? EventBusError)?.message ?? "\(error)", id: id)
            return
        }
        var fields: [String: FieldValue] = [:]
        if let given = request["fields"] {
            guard case .object(let members) = given else {
                error("bad_request", "\"fields\" must be an object, found \(given.kindName)", id: id)
                return
            }
            for (key, value) in members {
                switch value {
                case .string(let text): fields[key] = .string(text)
                case .int(let number): fields[key] = .int(number)
                case .double(let number): fields[key] = .double(number)
                case .bool(let flag): fields[key] = .bool(flag)
                default:
                    error("bad_request", "field \"\(key)\": a value is a string, number or boolean, found \(value.kindName)", id: id)
                    return
                }
            }
        }
        let sequence = server.bus.post(Event(name: name, source: "user", fields: fields))
        guard sequence > 0 else {
            error("shutting_down", "the host is shutting down; the event was not posted", id: id)
            return
        }
        respond(["type": "posted", "name": .string(name), "seq": .int(Int64(bitPattern: sequence))], id: id)
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
    /// the socket is full (then the write source calls again when it drains).
    private func pump() {
        guard !closed else { return }
        guard flush() else { return }
        while let feed {
            batch.removeAll(keepingCapacity: true)
            feed.take(upTo: Self.batchSize, into: &batch)
            if batch.isEmpty { return }  // the feed went idle; the next offer wakes us
            var delivered = 0
            var countReached = false
            for item in batch {
                switch item {
                case .event(let event):
                    encoder.event(event, into: &out)
                    delivered += 1
                    if let left = remaining {
                        remaining = left - 1
                        if left == 1 { countReached = true }
                    }
                case .gap(let dropped, let first, let last, let reason):
                    out.gapLine(dropped: dropped, first: first, last: last, reason: reason)
                }
                if countReached { break }
            }
            feed.didDeliver(delivered)
            if countReached {
                finish(reason: "count")
                return
            }
            guard flush() else { return }
        }
    }

    /// Writes what the output buffer holds. True when all of it went out; false when the socket
    /// is full (the write source is armed) or the session closed.
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
                if !writeArmed {
                    writeArmed = true
                    writeSource.resume()
                }
                return false
            case .closed:
                close()
                return false
            }
        }
        out.bytes.removeAll(keepingCapacity: out.bytes.capacity <= 1 << 20)
        written = 0
        if readPaused && readOpen {
            readPaused = false
            readSource.resume()
        }
        if closeWhenWritten {
            close()
            return false
        }
        return true
    }

    private func detachFeed() {
        guard let feed else { return }
        server.detach(feed)
        sourceSubscriptions.forEach { $0.cancel() }
        sourceSubscriptions = []
        self.feed = nil
    }

    private func close() {
        guard !closed else { return }
        closed = true
        detachFeed()
        if readOpen {
            readOpen = false
            readSource.cancel()
            if readPaused { readSource.resume() }  // a suspended source never runs its cancel handler
        }
        writeSource.cancel()
        // A suspended source never runs its cancel handler; resume it so it can.
        if !writeArmed {
            writeArmed = true
            writeSource.resume()
        }
    }

    /// Both sources are done with the descriptor: close it, and leave the server.
    private func sourceCancelled() {
        openSources -= 1
        guard openSources == 0 else { return }
        if !closed {
            closed = true
            detachFeed()
        }
        System.StreamSocket.close(fd)
        server.remove(self)
    }
}
