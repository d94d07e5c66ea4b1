import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation

/// A session's `post`: one event, or a batch of them in one request. On the loop's thread.
extension ControlSession {
    /// How many validated names ``validNames`` keeps.
    static let validNamesKept = 256

    private static let shuttingDown = ControlError(.shuttingDown, "the host is shutting down; the event was not posted")

    func post(_ request: PostRequest, id: JSON?) {
        switch request {
        case .one(let posted):
            let event = Self.event(posted)
            guard let sequence = server.post(event) else {
                error(Self.shuttingDown, id: id)
                return
            }
            respond(Posted(name: event.name, sequence: sequence).json, id: id)
        case .batch(let items):
            postBatch(items, id: id)
        }
    }

    /// `post` with `events`: one request, many events (scripts posting in bulk). Each item stands
    /// alone — the good ones are posted in order as one bus batch, each bad one is refused by its
    /// index and takes nothing else with it (``PostedBatch``).
    private func postBatch(_ items: [Result<PostedEvent, ControlError>], id: JSON?) {
        var good: [Event] = []
        good.reserveCapacity(items.count)
        for case .success(let posted) in items { good.append(Self.event(posted)) }
        let sequences = server.post(contentsOf: good)
        var next = 0  // into `good` and `sequences`
        PostedBatch.write(items: items.count, posted: sequences.count, id: id, into: &out) { index in
            if case .failure(let refusal) = items[index] { return .failure(refusal) }
            defer { next += 1 }
            // The shutdown began before this one: not posted, not acknowledged.
            return next < sequences.count ? .success(sequences[next]) : .failure(Self.shuttingDown)
        }
    }

    /// The event a decoded post describes, posted with source `user`.
    private static func event(_ posted: PostedEvent) -> Event {
        var fields: [String: FieldValue] = [:]
        fields.reserveCapacity(posted.fields.count)
        for (key, value) in posted.fields {
            switch value {
            case .string(let text): fields[key] = .string(text)
            case .int(let number): fields[key] = .int(number)
            case .double(let number): fields[key] = .double(number)
            case .bool(let flag): fields[key] = .bool(flag)
            case .null, .array, .object: continue  // refused by the decoder (``PostedEvent``)
            }
        }
        return Event(name: posted.name, source: "user", fields: fields)
    }
}
