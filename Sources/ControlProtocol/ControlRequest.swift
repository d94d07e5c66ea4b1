/// A request line of the control protocol, typed: the one decoder the host reads requests with
/// and the one encoder clients write them with (`PROTOCOL.md` describes the wire form).
///
/// Every body is typed (``SubscribeRequest``, ``PostRequest``, ``ListingRequest``): decoding
/// checks the members and the kinds of their values; what the values mean (event patterns, watch
/// limits, a client's access) the host checks against its own rules.
public struct ControlRequest: Equatable, Sendable {
    public enum Op: String, CaseIterable, Sendable {
        case subscribe, post, status, modules, rules, stats, listing, metrics, reload
    }

    public enum Body: Equatable, Sendable {
        case subscribe(SubscribeRequest)
        case post(PostRequest)
        case status, modules, rules, metrics, reload
        /// `detail`: the process and module figures too (what `eventbus top` shows), which cost
        /// the host a look at `/proc/self`; without it only the counters (cheap, for polling).
        case stats(detail: Bool)
        case listing(ListingRequest)
    }

    public var body: Body
    /// The client's tag, echoed in the answer (any JSON value).
    public var id: JSON?

    public init(_ body: Body, id: JSON? = nil) {
        self.body = body
        self.id = id
    }

    public var op: Op {
        switch body {
        case .subscribe: return .subscribe
        case .post: return .post
        case .status: return .status
        case .modules: return .modules
        case .rules: return .rules
        case .stats: return .stats
        case .metrics: return .metrics
        case .reload: return .reload
        case .listing: return .listing
        }
    }

    // MARK: Decoding (the host)

    /// What a line decodes to: nothing (a blank line), a request's envelope, or the error to
    /// answer with (and the request's `id`, when one was read).
    public enum Decoded: Equatable {
        case blank
        case envelope(Envelope)
        case failure(ControlError, id: JSON?)
    }

    /// A request's `op` and `id`, read before its body: the host checks the client's access to
    /// the op first, so a refused client learns nothing from the body's checks.
    public struct Envelope: Equatable {
        public var op: Op
        public var id: JSON?
        let members: [String: JSON]

        /// The whole request. `validName` vets a posted event's name (nil: fine; else the
        /// refusal), so batch items are refused in the order of their checks: name, then fields.
        public func request(validName: (String) -> ControlError? = { _ in nil }) -> Result<ControlRequest, ControlError> {
            let body: Body
            switch op {
            case .subscribe:
                do throws(ControlError) { body = .subscribe(try SubscribeRequest(members)) } catch { return .failure(error) }
            case .listing:
                do throws(ControlError) { body = .listing(try ListingRequest(members)) } catch { return .failure(error) }
            case .status: body = .status
            case .modules: body = .modules
            case .rules: body = .rules
            case .stats:
                guard let detail = members["detail"] else { body = .stats(detail: false); break }
                guard let flag = detail.boolValue else { return .failure(.badRequest("\"detail\" must be true or false, found \(detail.kindName)")) }
                body = .stats(detail: flag)
            case .metrics: body = .metrics
            case .reload: body = .reload
            case .post:
                switch PostRequest.decode(members, validName: validName) {
                case .success(let post): body = .post(post)
                case .failure(let error): return .failure(error)
                }
            }
            return .success(ControlRequest(body, id: id))
        }
    }

    private static let opList = Op.allCases.map(\.rawValue).joined(separator: ", ")

    /// Decodes one request line (without its newline) as far as its envelope.
    public static func decode(_ line: UnsafeBufferPointer<UInt8>) -> Decoded {
        if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { return .blank }
        let parsed: JSON
        do {
            parsed = try JSON.parse(line)
        } catch {
            return .failure(ControlError(.badJSON, "not JSON: \(error)"), id: nil)
        }
        guard case .object(let members) = parsed else {
            return .failure(.badRequest("a request is a JSON object with an \"op\", found \(parsed.kindName)"), id: nil)
        }
        let id = members["id"]
        guard let name = members["op"]?.stringValue else {
            return .failure(.badRequest("a request needs \"op\": one of \(opList)"), id: id)
        }
        guard let op = Op(rawValue: name) else {
            return .failure(ControlError(.unknownOp, "unknown op \"\(name)\"; expected one of \(opList)"), id: id)
        }
        return .envelope(Envelope(op: op, id: id, members: members))
    }

    /// Decodes a whole request line: its envelope, then its body (nil: a blank line).
    public static func decodeRequest(_ line: UnsafeBufferPointer<UInt8>,
                                     validName: (String) -> ControlError? = { _ in nil }) -> Result<ControlRequest?, ControlError> {
        switch decode(line) {
        case .blank: return .success(nil)
        case .failure(let error, _): return .failure(error)
        case .envelope(let envelope): return envelope.request(validName: validName).map { $0 }
        }
    }

    // MARK: Encoding (clients)

    /// The request's members (`op` and `id` included).
    public var members: [String: JSON] {
        var members: [String: JSON]
        switch body {
        case .subscribe(let subscribe): members = subscribe.members
        case .listing(let listing): members = listing.members
        case .post(let post): members = post.members
        case .stats(let detail): members = detail ? ["detail": .bool(true)] : [:]
        case .status, .modules, .rules, .metrics, .reload: members = [:]
        }
        members["op"] = .string(op.rawValue)
        if let id { members["id"] = id }
        return members
    }

    /// The request as one line, newline included.
    public var line: [UInt8] { JSONWriter.line(.object(members)) }
}
