import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation

/// A session's `post`: one event, or a batch of them in one request. On the loop's thread.
extension ControlSession {
    /// How many validated names ``validNames`` keeps.
    static let validNamesKept = 256

    func post(_ request: [String: JSON], id: JSON?) {
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
}
