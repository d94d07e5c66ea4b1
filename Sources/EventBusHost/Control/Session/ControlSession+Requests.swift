import ControlProtocol
import Foundation

/// A session's requests: the greeting, routing each request line to its handler after the
/// access check, and the answer lines. On the loop's thread.
extension ControlSession {
    /// The `hello` line: who the host is and what this client may ask.
    func greet() {
        var may: [JSON] = []
        if server.access.permits(.tail, peer) { may += ["tail", "status", "modules", "stats", "metrics"] }
        if server.access.permits(.post, peer) { may.append("post") }
        if server.access.permits(.reload, peer), server.reloadHandler != nil { may.append("reload") }
        var hello: [String: JSON] = ["type": "hello", "server": "eventbusd", "may": .array(may)]
        hello["protocol"] = .int(Int64(ControlProtocol.version))
        hello["pid"] = .int(Int64(getpid()))
        hello["uid"] = .int(Int64(peer.userID))
        respond(.object(hello), id: nil)
    }

    func handle(line: UnsafeBufferPointer<UInt8>) {
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

    /// Whether the peer may do `permission`; when not, the refusal is answered and logged.
    private func allowed(_ permission: ControlAccess.Permission, op: String, id: JSON?) -> Bool {
        let access = server.access
        if access.permits(permission, peer) { return true }
        let reason = access.refusal(permission, peer)
        server.logger.warning("control: refused \(op) from uid \(peer.userID) (pid \(peer.processID)): \(reason)")
        error("forbidden", reason, id: id)
        return false
    }

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

    // MARK: Answers

    func respond(_ response: JSON, id: JSON?) {
        var response = response
        if let id, case .object(var members) = response {
            members["id"] = id
            response = .object(members)
        }
        out.value(response)
        out.byte(0x0A)
    }

    func error(_ code: String, _ message: String, id: JSON?) {
        respond(["type": "error", "code": .string(code), "message": .string(message)], id: id)
    }
}
