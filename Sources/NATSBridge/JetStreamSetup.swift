import CNATS
@_spi(EventBusHost) import EventBusKit
import Foundation

/// The stream every host publishes to and this host's durable consumer on it.
///
/// Threads: the durable importer's thread (and `start` for the stream), never concurrently.
struct JetStreamSetup {
    let jetStream: OpaquePointer
    let durable: BridgeConfig.Durable
    let subjects: Subjects
    let consumer: String
    /// How long the server keeps one of this host's consumers that nobody pulls from: the
    /// backstop for a delete that was lost (sent to a dying server) and for the consumer of a
    /// host that was SIGKILLed. A running host pulls at least every 250 ms. A property, not a
    /// constant, so a test can watch the server remove a consumer within seconds.
    var inactiveThreshold = Self.defaultInactiveThreshold
    static let defaultInactiveThreshold = Duration.seconds(120)

    /// Checks that the stream exists and stores this bridge's subjects (its limits are the
    /// operator's: logged, not changed), or creates it with the configured limits. Returns the
    /// stream's first and last sequence and a note on differing limits.
    ///
    /// Asked first, created only if missing: in a cluster the stream's info is answered by its
    /// leader, while a create goes to the meta leader — which, when the server that died was it,
    /// answers nothing until the cluster elected another. Every host asks at each reconnect; a
    /// create first cost a timeout (and a retry) each time, 6 to 10 s of stalled imports and
    /// exports after a server death in the chaos test.
    @discardableResult
    func ensureStream() throws(BridgeError) -> (first: UInt64, last: UInt64, note: String?) {
        var errorCode = jsErrCode(0)
        var existing: UnsafeMutablePointer<jsStreamInfo>?
        let lookup = js_GetStreamInfo(&existing, jetStream, durable.stream, nil, &errorCode)
        if lookup == NATS_OK, let existing {
            defer { jsStreamInfo_Destroy(existing) }
            return try check(existing)
        }
        guard lookup == NATS_NOT_FOUND else {
            throw BridgeError(.jetStream, "cannot find stream \(durable.stream): \(BridgeError.text(lookup))")
        }
        var config = jsStreamConfig()
        jsStreamConfig_Init(&config)
        let name = strdup(durable.stream)!
        let subject = strdup(subjects.all)!
        defer { free(name); free(subject) }
        var subjectList: [UnsafePointer<CChar>?] = [UnsafePointer(subject)]
        var info: UnsafeMutablePointer<jsStreamInfo>?
        let status = subjectList.withUnsafeMutableBufferPointer { list -> natsStatus in
            config.Name = UnsafePointer(name)
            config.Subjects = list.baseAddress
            config.SubjectsLen = 1
            config.Storage = js_FileStorage
            config.MaxAge = durable.maxAge.clampedNanoseconds
            config.MaxBytes = durable.maxBytes > 0 ? durable.maxBytes : -1
            config.MaxMsgs = durable.maxMessages > 0 ? durable.maxMessages : -1
            config.Duplicates = durable.duplicateWindow.clampedNanoseconds
            config.Replicas = Int64(durable.replicas)
            return js_AddStream(&info, jetStream, &config, nil, &errorCode)
        }
        if status == NATS_OK, let info {
            defer { jsStreamInfo_Destroy(info) }
            return (info.pointee.State.FirstSeq, info.pointee.State.LastSeq, nil)
        }
        // Made meanwhile by another host (with other settings): check it carries our subjects.
        var made: UnsafeMutablePointer<jsStreamInfo>?
        guard js_GetStreamInfo(&made, jetStream, durable.stream, nil, &errorCode) == NATS_OK, let made else {
            throw BridgeError(.jetStream, "cannot create or find stream \(durable.stream): \(BridgeError.text(status))")
        }
        defer { jsStreamInfo_Destroy(made) }
        return try check(made)
    }

    /// Checks an existing stream carries this bridge's subjects; notes limits other than the
    /// configured ones.
    private func check(_ existing: UnsafeMutablePointer<jsStreamInfo>) throws(BridgeError) -> (first: UInt64, last: UInt64, note: String?) {
        let stored = existing.pointee.Config.map { config in
            (0..<Int(config.pointee.SubjectsLen)).compactMap { config.pointee.Subjects[$0].map { String(cString: $0) } }
        } ?? []
        guard stored.contains(subjects.all) || stored.contains(">") else {
            throw BridgeError(.jetStream, "stream \(durable.stream) exists but stores \(stored), not \(subjects.all); name another stream (bridge.nats.durable.stream) or add the subject to it")
        }
        var note: String?
        let maxAge = durable.maxAge.clampedNanoseconds
        let maxBytes = durable.maxBytes > 0 ? durable.maxBytes : -1
        let maxMessages = durable.maxMessages > 0 ? durable.maxMessages : -1
        if let stored = existing.pointee.Config?.pointee,
           stored.MaxAge != maxAge || stored.MaxBytes != maxBytes || stored.MaxMsgs != maxMessages {
            note = "stream \(durable.stream) exists with other limits (max age \(stored.MaxAge / 1_000_000_000) s, max bytes \(stored.MaxBytes), max msgs \(stored.MaxMsgs)); kept as they are"
        }
        return (existing.pointee.State.FirstSeq, existing.pointee.State.LastSeq, note)
    }

    /// The consumer sequence of the last delivery of this host's consumer `name`, if the consumer can
    /// be pulled from as it is: it exists with `filter`, has delivered nothing past stream
    /// sequence `taken` (what this host took in) and waits for no acknowledgement. Then its next
    /// delivery is the next message after `taken`, in stream order — what re-creating it would
    /// deliver. Nil otherwise (or when no answer came within 1 s): the caller re-creates it.
    ///
    /// Why ask: re-creating is a request to the cluster's meta leader, which after a server's
    /// death — when it was the meta leader, or while the others still count it as alive —
    /// answered only after several seconds; the consumer's own leader answers this one, and a
    /// host whose server died while its consumer lives on another is back at once.
    func resumableConsumer(_ name: String, filter: String, taken: UInt64) -> (lastDelivery: UInt64, pending: UInt64)? {
        var options = jsOptions()
        jsOptions_Init(&options)
        options.Wait = 1_000
        var errorCode = jsErrCode(0)
        var info: UnsafeMutablePointer<jsConsumerInfo>?
        guard js_GetConsumerInfo(&info, jetStream, durable.stream, name, &options, &errorCode) == NATS_OK, let info else {
            return nil
        }
        defer { jsConsumerInfo_Destroy(info) }
        let delivered = info.pointee.Delivered
        guard let config = info.pointee.Config?.pointee, let subject = config.FilterSubject,
              String(cString: subject) == filter, config.DeliverPolicy == js_DeliverByStartSequence, config.AckPolicy == js_AckAll,
              delivered.Stream <= taken, info.pointee.NumAckPending == 0 else { return nil }
        return (delivered.Consumer, info.pointee.NumPending)
    }

    /// Creates one of this host's consumers, `name`, delivering from `startSequence`, filtered on
    /// `filter`.
    ///
    /// Why create rather than resume the server's position: the host's ledger, written after
    /// each batch is posted, is the truth about what this host has taken in. Starting a consumer
    /// right after it keeps delivery in stream order — a consumer resumed as it was would first
    /// deliver new messages and only redeliver the unacknowledged ones after `ack_wait`, out of
    /// order; nats-server 2.9 cannot move an existing consumer.
    ///
    /// Why a new name each time (`<consumer>-<random hex>`), the previous one deleted without
    /// waiting (``requestDelete(_:connection:)``) and every one removed by the server after
    /// ``inactiveThreshold`` without pulls (tested against nats-server 2.9.10:
    /// `ConsumerInactivityTests`): re-creating under one name waited for the server that
    /// held it. A one-replica consumer on a server that died could not be deleted (no answer),
    /// and its name could not be added again until the cluster gave up on that server (about 30 s
    /// in the chaos test); a new name is placed anew, most often on a live server.
    /// Returns how many messages the new consumer has to deliver.
    @discardableResult
    func placeConsumer(name: String, startSequence: UInt64, filter: String) throws(BridgeError) -> UInt64 {
        var errorCode = jsErrCode(0)
        var config = jsConsumerConfig()
        jsConsumerConfig_Init(&config)
        let durableName = strdup(name)!
        let filterSubject = strdup(filter)!
        defer { free(durableName); free(filterSubject) }
        config.Durable = UnsafePointer(durableName)
        config.DeliverPolicy = js_DeliverByStartSequence
        config.OptStartSeq = max(1, startSequence)
        // One acknowledgement per fetched batch, for the last message taken: the host's ledger,
        // not the server's acknowledgements, says what it has taken in (an acknowledgement only
        // spares the server redeliveries), and one per message cost the importer a publish and
        // the server an acknowledgement to process for every event.
        config.AckPolicy = js_AckAll
        config.AckWait = durable.ackWait.clampedNanoseconds
        config.FilterSubject = UnsafePointer(filterSubject)
        config.MaxAckPending = 20_000
        config.Replicas = Int64(durable.consumerReplicas)
        config.InactiveThreshold = inactiveThreshold.clampedNanoseconds
        var info: UnsafeMutablePointer<jsConsumerInfo>?
        let added = js_AddConsumer(&info, jetStream, durable.stream, &config, nil, &errorCode)
        guard added == NATS_OK else {
            throw BridgeError(.jetStream, "cannot create consumer \(name) on stream \(durable.stream): \(BridgeError.text(added))")
        }
        defer { jsConsumerInfo_Destroy(info) }
        return info?.pointee.NumPending ?? 0
    }

    /// The stream sequence of the stream's last message matching `filter`, as its leader sees
    /// it (0: none), or nil when no answer came within 1 s.
    ///
    /// Why: a consumer reads the stream from its own server's copy. nats-server 2.9.10 can leave
    /// a restarted server's copy behind for minutes ("Catchup for stream … stalled" every 10 s in
    /// its log); a one-replica consumer placed there — or resumed there after its server came
    /// back — says nothing is pending and delivers nothing, while the leader holds thousands of
    /// messages after it. Seen in the cluster chaos test: a host's imports stopped for good,
    /// twice in five runs. Compared with what the consumer says is pending, this answer tells
    /// such a consumer from one with nothing to deliver (``DurableImporter``).
    func lastSequence(matching filter: String) -> UInt64? {
        var options = jsOptions()
        jsOptions_Init(&options)
        options.Wait = 1_000
        var errorCode = jsErrCode(0)
        var message: OpaquePointer?
        switch js_GetLastMsg(&message, jetStream, durable.stream, filter, &options, &errorCode) {
        case NATS_OK:
            defer { natsMsg_Destroy(message) }
            return natsMsg_GetSequence(message)
        case NATS_NOT_FOUND:
            return 0
        default:
            return nil
        }
    }

    /// Asks the server to delete consumer `name` without waiting for the answer (nobody may
    /// give one: the server that held it may be dead; ``inactiveThreshold`` removes it then).
    func requestDelete(_ name: String, connection: OpaquePointer) {
        let api = durable.domain.map { "$JS.\($0).API" } ?? "$JS.API"
        _ = natsConnection_PublishString(connection, "\(api).CONSUMER.DELETE.\(durable.stream).\(name)", "")
    }
}
