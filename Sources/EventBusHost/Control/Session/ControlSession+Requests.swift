import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation

/// A session's requests: the greeting, decoding each request line (``ControlRequest``), the
/// access check, routing to its handler, and the answer lines. On the loop's thread.
extension ControlSession {
    /// The `hello` line: who the host is and what this client may ask.
    func greet() {
        let access = server.access
        var may: [String] = []
        if access.permits(.tail, peer) { may += ["tail", "status", "modules", "rules", "stats", "metrics"] }
        if access.permits(.post, peer) { may.append("post") }
        if access.permits(.reload, peer), server.reloadHandler != nil { may.append("reload") }
        respond(Hello(may: may, processID: Int64(getpid()), userID: Int64(peer.userID), life: server.life).json, id: nil)
    }

    func handle(line: UnsafeBufferPointer<UInt8>) {
        let envelope: ControlRequest.Envelope
        switch ControlRequest.decode(line) {
        case .blank: return
        case .failure(let failure, let id):
            error(failure, id: id)
            return
        case .envelope(let decoded): envelope = decoded
        }
        let id = envelope.id
        let permission: ControlAccess.Permission
        switch envelope.op {
        case .post: permission = .post
        case .reload: permission = .reload
        case .subscribe, .status, .modules, .rules, .stats, .listing, .metrics: permission = .tail
        }
        guard allowed(permission, op: envelope.op, id: id) else { return }
        if let refusal = server.refusalWhileStopping(envelope.op) {
            error(refusal, id: id)
            return
        }
        let request: ControlRequest
        switch envelope.request(validName: { [self] name in validate(eventName: name) }) {
        case .success(let decoded): request = decoded
        case .failure(let failure):
            error(failure, id: id)
            return
        }
        switch request.body {
        case .subscribe(let subscribe): self.subscribe(subscribe, id: id)
        case .post(let post): self.post(post, id: id)
        case .status: respond(server.status().json, id: id)
        case .modules: respond(server.modules(), id: id)
        case .rules: respond(server.rules(), id: id)
        case .stats(let detail): respond(server.stats(detail: detail).json, id: id)
        case .metrics: respond(server.metrics(), id: id)
        case .reload: reload(id: id)
        case .listing(let listing):
            switch ListingAnswer.answer(listing, peer: peer, server: server) {
            case .success(let listing): respond(listing, id: id)
            case .failure(let failure): error(failure, id: id)
            }
        }
    }

    /// Whether the peer may do `permission`; when not, the refusal is answered and logged.
    private func allowed(_ permission: ControlAccess.Permission, op: ControlRequest.Op, id: JSON?) -> Bool {
        let access = server.access
        if access.permits(permission, peer) { return true }
        let reason = access.refusal(permission, peer)
        server.logger.warning("control: refused \(op.rawValue) from uid \(peer.userID) (pid \(peer.processID)): \(reason)")
        error(ControlError(.forbidden, reason), id: id)
        return false
    }

    /// Whether a posted event's name follows the rules (nil), remembered for the names this
    /// client posts again and again (``validNames``).
    private func validate(eventName name: String) -> ControlError? {
        if validNames.contains(name) { return nil }
        do {
            try EventPattern.validate(eventName: name)
        } catch {
            return ControlError(.invalidName, (error as? EventBusError)?.message ?? "\(error)")
        }
        if validNames.count == Self.validNamesKept { validNames.removeAll(keepingCapacity: true) }
        validNames.insert(name)
        return nil
    }

    /// Answered when the reload has run (on the host's control queue, while this connection
    /// keeps being served): `reloaded` with the summary, or `reload_failed` with the config error.
    private func reload(id: JSON?) {
        guard let handler = server.reloadHandler else {
            error(ControlError(.unavailable, "this eventbusd cannot be reloaded through its control socket"), id: id)
            return
        }
        server.logger.info("control: reload asked by uid \(peer.userID) (pid \(peer.processID))")
        handler { [self] outcome in
            loop.execute { [self] in
                guard !closed else { return }
                switch outcome {
                case .applied(let summary): respond(Reloaded.json(message: summary), id: id)
                case .refused(let reason): error(ControlError(.reloadFailed, reason), id: id)
                }
                flush()
            }
        }
    }

    // MARK: Answers

    /// Appends one answer line (the request's `id` added) to the output.
    func respond(_ response: JSON, id: JSON?) {
        var response = response
        if let id, case .object(var members) = response {
            members["id"] = id
            response = .object(members)
        }
        out.value(response)
        out.byte(0x0A)
    }

    func error(_ failure: ControlError, id: JSON?) {
        respond(failure.json, id: id)
    }
}
