import ControlProtocol
import Foundation
@_spi(EventBusHost) import EventBusKit
import SystemCalls

/// An exec module's side of ``WorkerSession``: its program's standard output read as the
/// protocol's lines (`post`, `log`, `subscribe`), its standard error logged line by line. The
/// protocol: docs/modules-any-language.md.
///
/// A line that is not the protocol — not JSON, no known `type`, a bad post, longer than
/// ``ExecLink/maximumLine`` — is a *protocol error*: counted in the module's errors, logged with
/// what was wrong, and the program goes on. Only its end (or the end of its output) ends the
/// session.
extension WorkerSession {
    /// Starts the channel (standard input) and the two readers.
    func startExec(_ exec: ExecLink) {
        channel.start()
        exec.readers.enter()
        exec.readers.enter()
        let errors = Thread { [self] in
            System.nameCurrentThread("e<" + name)
            readErrors(exec)
            exec.errors.close()
            exec.readers.leave()
        }
        errors.stackSize = 256 * 1024
        errors.start()
        let output = Thread { [self] in
            System.nameCurrentThread("r<" + name)
            readOutput(exec)
            exec.output.close()
            exec.readers.leave()
            let reason = outputEndReason()
            replies.end()
            onEnd(self, reason)
        }
        output.start()
    }

    /// Why the output ended: the program ended (``FrameChannel/endOfInput``), or it closed its
    /// standard output and runs on — then the host ends it, as it would a worker that closed
    /// its socket.
    private func outputEndReason() -> String {
        // A program that ends closes its output a moment before its exit is seen.
        let deadline = ContinuousClock.now + .seconds(2)
        while !process.hasEnded, ContinuousClock.now < deadline { System.sleep(for: .milliseconds(2)) }
        return process.hasEnded ? FrameChannel.endOfInput : "it closed its standard output"
    }

    private func readOutput(_ exec: ExecLink) {
        var lines = BoundedLines(limit: ExecLink.maximumLine)
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = buffer.withUnsafeMutableBytes { exec.output.read(into: $0) }
            if count == 0 { break }
            buffer.withUnsafeBytes { raw in
                lines.feed(UnsafeRawBufferPointer(rebasing: raw[0..<count])) { handle($0, exec) }
            }
        }
        lines.finish { handle($0, exec) }
        reportDroppedPosts(exec, force: true)
    }

    private func readErrors(_ exec: ExecLink) {
        var lines = BoundedLines(limit: ExecLink.maximumErrorLine)
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        let emit = { [log] (piece: BoundedLines.Piece) in
            switch piece {
            case .line(let bytes): log.notice("stderr: \(String(decoding: bytes, as: UTF8.self))")
            case .tooLong(let length): log.notice("stderr: (a line of \(length) bytes, longer than \(ExecLink.maximumErrorLine), left out)")
            }
        }
        while true {
            let count = buffer.withUnsafeMutableBytes { exec.errors.read(into: $0) }
            if count == 0 { break }
            buffer.withUnsafeBytes { lines.feed(UnsafeRawBufferPointer(rebasing: $0[0..<count]), emit) }
        }
        lines.finish(emit)
    }

    private func handle(_ piece: BoundedLines.Piece, _ exec: ExecLink) {
        switch piece {
        case .tooLong(let length):
            protocolError("a line of \(length) bytes was left out: a line is at most \(ExecLink.maximumLine) bytes")
        case .line(let bytes):
            if bytes.isEmpty { return }
            let json: JSON
            do {
                json = try bytes.withUnsafeBufferPointer { try JSON.parse($0) }
            } catch {
                protocolError("a line is not JSON (\(error)): \(Self.preview(bytes))")
                return
            }
            guard case .object(var members) = json, let type = members.removeValue(forKey: "type")?.stringValue else {
                protocolError("a line is an object with a \"type\" (post, log or subscribe): \(Self.preview(bytes))")
                return
            }
            switch type {
            case "post": post(members, exec)
            case "log": logLine(members)
            case "subscribe": subscribe(members, exec)
            default: protocolError("unknown line type \"\(type)\" (post, log or subscribe are written by a module)")
            }
        }
    }

    /// `{"type":"post","name":…,"fields":{…}}`: checked as a control socket post is (the name's
    /// rules, the fields' types), posted with the module's name as its source.
    private func post(_ members: [String: JSON], _ exec: ExecLink) {
        if let problem = PostedEvent.itemProblem(members, in: "a post line") {
            protocolError("post: \(problem)")
            return
        }
        let decoded = PostedEvent.decode(members) { name in
            do {
                try EventPattern.validate(eventName: name)
                return nil
            } catch {
                return ControlError(.invalidName, (error as? EventBusError)?.message ?? "\(error)")
            }
        }
        switch decoded {
        case .failure(let refusal):
            protocolError("post refused: \(refusal.message)")
        case .success(let posted):
            let now = MonotonicClock.now()
            guard exec.allowance.take(at: now) else {
                exec.postsDropped += 1
                reportDroppedPosts(exec, force: false)
                return
            }
            var fields: [String: FieldValue] = [:]
            for (key, value) in posted.fields {
                switch value {
                case .string(let text): fields[key] = .string(text)
                case .int(let number): fields[key] = .int(number)
                case .double(let number): fields[key] = .double(number)
                case .bool(let flag): fields[key] = .bool(flag)
                case .null, .array, .object: continue  // refused by the decoder
                }
            }
            hostBus.post(Event(name: posted.name, source: name, fields: fields))
        }
    }

    /// At most once a second (or at the end): how many posts the allowance dropped.
    private func reportDroppedPosts(_ exec: ExecLink, force: Bool) {
        let now = MonotonicClock.now()
        guard let dropped = force ? exec.allowance.takeDropped(at: .max) : exec.allowance.takeDropped(at: now) else { return }
        log.warning("\(dropped) post(s) dropped: the module posts faster than its posts_per_second (\(exec.settings.postsPerSecond)); \(exec.postsDropped) dropped in all")
    }

    /// `{"type":"log","level":"info","message":…}`.
    private func logLine(_ members: [String: JSON]) {
        guard let message = members["message"]?.stringValue else {
            protocolError("log: \"message\" (a string) is missing")
            return
        }
        let text = members["level"]?.stringValue ?? "info"
        guard let level = ModuleLog.Level(rawValue: text) else {
            protocolError("log: level \"\(text)\" is none of \(ModuleLog.Level.allCases.map(\.rawValue).joined(separator: ", "))")
            return
        }
        log.log(level, message)
    }

    /// `{"type":"subscribe","patterns":["user.disk.*","unit.state active=failed"]}`: each one a
    /// subscription of its own, as the config's `subscribe:` entries are.
    private func subscribe(_ members: [String: JSON], _ exec: ExecLink) {
        guard let patterns = members["patterns"]?.arrayValue, !patterns.isEmpty else {
            protocolError("subscribe: \"patterns\" (a list of strings) is missing")
            return
        }
        for pattern in patterns {
            do {
                guard let text = pattern.stringValue else {
                    throw ExecSubscription.ParseError(description: "a pattern is a string, found \(pattern.kindName)")
                }
                try subscribeExec(try ExecSubscription(parsing: text), exec)
            } catch {
                protocolError("subscribe: \(error)")
            }
        }
    }

    /// Subscribes on the module's behalf, unless it already did for this program; its field
    /// matches apply before it is made.
    func subscribeExec(_ subscription: ExecSubscription, _ exec: ExecLink) throws {
        guard exec.made.withLock({ $0.insert(subscription).inserted }) else { return }
        let id = exec.lines.register(subscription)
        try forwarding.subscribe(worker: worker, id: id, spec: subscription.spec)
    }

    private func protocolError(_ message: String) {
        errors.add(1, ordering: .relaxed)
        log.warning("protocol error: \(message)")
    }

    /// The start of a line, for a message.
    private static func preview(_ bytes: [UInt8]) -> String {
        let text = String(decoding: bytes.prefix(120), as: UTF8.self)
        return bytes.count > 120 ? text + "…" : text
    }
}
