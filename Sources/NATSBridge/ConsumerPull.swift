import CNATS
@_spi(EventBusHost) import EventBusKit
import Foundation

/// Pull requests to this host's durable consumer, made by hand: one publish to the consumer's
/// `CONSUMER.MSG.NEXT` subject with a plain subscription's inbox as the reply, and the batch
/// read from that subscription into an array of our own.
///
/// Why not nats.c's `natsSubscription_FetchRequest`: in nats.c 3.4.1 (Debian 12's) a fetch that
/// starts with more than half its batch already waiting — deliveries a slow server sent after
/// the previous fetch had given up — lowers its target below what it already holds and reads on
/// past the end of its message array (a heap overflow, fixed upstream in nats.c 3.9: "Fix heap
/// buffer overflow in _fetch", #749). Under load, around server deaths, hosts aborted with
/// glibc's "double free or corruption (!prev)" some time later. docs/fleet-durability.md, "Fetching".
///
/// A delivery that arrives after its fetch ended is not lost: it waits in the subscription and
/// the next fetch takes it first, before asking for more (it is next in the consumer's order).
///
/// Thread: the durable importer's thread only (nats.c's read loop fills the subscription).
struct ConsumerPull {
    /// The plain subscription on ``inbox`` (owned by the importer, which retires it).
    let subscription: OpaquePointer
    private let connection: OpaquePointer
    /// The subject the server delivers pulled messages to.
    let inbox: String
    private let nextSubject: String

    enum Outcome {
        /// User messages, in delivery order; the caller destroys each (`natsMsg_Destroy`).
        case messages([OpaquePointer])
        /// Nothing within the wait (the stream has nothing new for this consumer).
        case nothing
        /// The next message alone is larger than the fetch's `max_bytes` (the server's 409).
        case tooLarge
        /// The request could not be sent, the subscription or connection closed, or the server
        /// refused the request (consumer deleted…): the caller binds again.
        case failed(String)
    }

    /// Subscribes to a new inbox for pulls from `consumer` on `stream`. `domain`: the JetStream
    /// domain whose API prefix the request uses (`$JS.<domain>.API`).
    init(connection: OpaquePointer, stream: String, consumer: String, domain: String?) throws(BridgeError) {
        var inboxPointer: UnsafeMutablePointer<natsInbox>?
        try BridgeError.check(natsInbox_Create(&inboxPointer), .jetStream, "an inbox for pulls")
        defer { natsInbox_Destroy(inboxPointer) }
        let inbox = String(cString: inboxPointer!)
        var subscription: OpaquePointer?
        try BridgeError.check(natsConnection_SubscribeSync(&subscription, connection, inbox), .jetStream,
                              "subscribe to \(inbox) for consumer \(consumer)")
        self.subscription = subscription!
        self.connection = connection
        self.inbox = inbox
        let api = domain.map { "$JS.\($0).API" } ?? "$JS.API"
        nextSubject = "\(api).CONSUMER.MSG.NEXT.\(stream).\(consumer)"
    }

    /// Up to `batch` messages and about `maxBytes` (0: any), waiting at most `wait` for them.
    /// `no_wait`: the server answers at once with what it has (a 404 when that is nothing)
    /// rather than holding the request until the whole batch is there.
    func fetch(batch: Int, maxBytes: Int64, wait: Duration) -> Outcome {
        var messages: [OpaquePointer] = []
        var bytes: Int64 = 0
        func full() -> Bool { messages.count >= batch || (maxBytes > 0 && bytes >= maxBytes) }
        func keep(_ message: OpaquePointer) {
            messages.append(message)
            bytes += Int64(natsMsg_GetDataLength(message))
        }
        // Late deliveries of an earlier request first; their statuses end nothing now.
        while !full() {
            var message: OpaquePointer?
            guard natsSubscription_NextMsg(&message, subscription, 0) == NATS_OK, let message else { break }
            if Self.status(of: message) == nil { keep(message) } else { natsMsg_Destroy(message) }
        }
        if !messages.isEmpty { return .messages(messages) }

        let waitNanoseconds = wait.clampedNanoseconds
        // The server's expiry a little before ours, so its end-of-request status comes in time.
        let expires = waitNanoseconds >= 20_000_000 ? waitNanoseconds - 10_000_000 : waitNanoseconds
        let body = "{\"batch\":\(batch)\(maxBytes > 0 ? ",\"max_bytes\":\(maxBytes)" : ""),\"expires\":\(expires),\"no_wait\":true}"
        let sent = natsConnection_PublishRequestString(connection, nextSubject, inbox, body)
        guard sent == NATS_OK else { return .failed("pull request to \(nextSubject): \(BridgeError.text(sent))") }
        let deadline = ContinuousClock.now + .nanoseconds(waitNanoseconds)
        reading: while !full() {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { break }
            var message: OpaquePointer?
            let read = natsSubscription_NextMsg(&message, subscription, max(1, left.clampedNanoseconds / 1_000_000))
            if read == NATS_TIMEOUT { break }
            guard read == NATS_OK, let message else {
                messages.forEach { natsMsg_Destroy($0) }
                return .failed("reading pulled messages: \(BridgeError.text(read))")
            }
            guard let (code, description) = Self.status(of: message) else {
                keep(message)
                continue
            }
            natsMsg_Destroy(message)
            switch code {
            case "100":
                continue  // a heartbeat or flow control, not an answer
            case "404", "408":
                break reading  // nothing (more) for this request, or it expired
            case "409" where description.contains("Exceeds MaxBytes") && messages.isEmpty:
                return .tooLarge
            default:
                if messages.isEmpty { return .failed("the server refused the pull: \(code) \(description)") }
                break reading
            }
        }
        return messages.isEmpty ? .nothing : .messages(messages)
    }

    /// Acknowledges one delivery (JetStream's `+ACK` to its reply subject), without waiting.
    func acknowledge(_ message: OpaquePointer) {
        guard let reply = natsMsg_GetReply(message) else { return }
        _ = natsConnection_PublishString(connection, reply, "+ACK")
    }

    /// The status code and description of a server status message (an empty message whose
    /// header carries `Status`), nil for a delivery.
    private static func status(of message: OpaquePointer) -> (code: String, description: String)? {
        guard natsMsg_GetDataLength(message) == 0 else { return nil }
        var value: UnsafePointer<CChar>?
        guard natsMsgHeader_Get(message, "Status", &value) == NATS_OK, let value else { return nil }
        var description: UnsafePointer<CChar>?
        let text = natsMsgHeader_Get(message, "Description", &description) == NATS_OK ? description.map { String(cString: $0) } : nil
        return (String(cString: value), text ?? "")
    }
}
