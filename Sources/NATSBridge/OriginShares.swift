import CNATS

/// One core import subscription's messages between nats.c and the bus, held per origin and
/// taken out in turn, so that an origin sending more than this host takes in costs only itself.
///
/// Why: a subscription (`<prefix>.*.<pattern>`) carries every origin's events through one nats.c
/// queue, and nats.c drops past its pending limits whatever comes next — a peer flooding the
/// subject at full speed had the events of every other host dropped among its own. So the
/// delivery thread takes messages out of nats.c at once (``CoreImporter``: only routed, the
/// header's numbers read, no decoding) into one queue per origin host (the subject's host
/// token), and decodes and posts them taking one message from each origin in turn. An origin
/// within its share — what the host takes in, divided among the origins that have something
/// waiting — is never held behind another's backlog; only the origin holding the most waits,
/// and past the bounds (``countLimit`` messages, ``bytesLimit`` bytes, for all origins
/// together) the newest message of the origin that holds the most (in bytes when the bytes are
/// over, else in messages) is dropped and counted against it (`over_share`, with its name).
///
/// Messages refused by their subject never enter (counted as `malformed` before, at the cost of
/// a route look-up); a payload that does not decode waits in the queue of the host its subject
/// claims and costs that host's share. Anyone who may publish under the prefix can claim any
/// host name: past ``originLimit`` origins with messages waiting, further ones share one queue
/// (announced without a name).
///
/// Threads: the subscription's nats.c delivery thread only (its message and completion
/// callbacks); no lock.
final class OriginShares {
    /// A message taken from nats.c, not yet decoded: ours to free (`natsMsg_free`).
    struct Held {
        let message: OpaquePointer
        let route: ImportRoutes.Route
        let bytes: Int
    }

    /// One origin's messages, oldest first.
    final class Queue {
        /// The subject's host token; nil for the queue origins past ``originLimit`` share.
        let origin: String?
        fileprivate var messages = ImportFIFO<Held>()
        fileprivate var bytes = 0
        /// In the serving ring (which may still hold it once it is empty: it leaves at its turn).
        fileprivate var inRing = false

        init(origin: String?) { self.origin = origin }

        var isEmpty: Bool { messages.isEmpty }
    }

    /// Origins with a queue of their own.
    static let originLimit = 256

    let countLimit: Int
    let bytesLimit: Int
    private(set) var count = 0
    private(set) var bytes = 0
    private var queues: [String: Queue] = [:]
    private let shared = Queue(origin: nil)
    /// The queue used last: messages come in runs of one origin.
    private var last: Queue?
    /// Queues with messages, in serving order.
    private var ring = ImportFIFO<Queue>()

    init(countLimit: Int, bytesLimit: Int) {
        self.countLimit = max(1, countLimit)
        self.bytesLimit = max(1, bytesLimit)
    }

    var isEmpty: Bool { count == 0 }

    /// Takes `held` in behind its origin's earlier messages. Past the bounds, hands the newest
    /// message of the origin holding the most (`held` itself when that is its origin) to
    /// `drop`, which counts and frees it; a lone message is kept whatever its size.
    func append(_ held: Held, drop: (Held, _ origin: String?) -> Void) {
        let queue = self.queue(for: held.route.host)
        queue.messages.append(held)
        queue.bytes += held.bytes
        count += 1
        bytes += held.bytes
        if !queue.inRing {
            queue.inRing = true
            ring.append(queue)
        }
        while count > 1, count > countLimit || bytes > bytesLimit {
            let overBytes = bytes > bytesLimit
            guard let victim = ring.elements.max(by: { overBytes ? $0.bytes < $1.bytes : $0.messages.count < $1.messages.count }),
                  let dropped = victim.messages.popLast() else { return }
            victim.bytes -= dropped.bytes
            count -= 1
            bytes -= dropped.bytes
            drop(dropped, victim.origin)
        }
    }

    /// The next message to decode: the oldest of the origin whose turn it is, which then goes
    /// to the back of the ring.
    func next() -> Held? {
        while let queue = ring.popFirst() {
            guard let held = queue.messages.popFirst() else {
                queue.inRing = false
                continue
            }
            queue.bytes -= held.bytes
            count -= 1
            bytes -= held.bytes
            if queue.isEmpty { queue.inRing = false } else { ring.append(queue) }
            return held
        }
        return nil
    }

    private func queue(for origin: String) -> Queue {
        if let last, last.origin == origin { return last }
        let queue: Queue
        if let known = queues[origin] {
            queue = known
        } else {
            if queues.count >= Self.originLimit {
                queues = queues.filter { !$0.value.isEmpty }  // origins with nothing waiting are forgotten
                last = nil
            }
            if queues.count >= Self.originLimit {
                queue = shared
            } else {
                queue = Queue(origin: origin)
                queues[origin] = queue
            }
        }
        last = queue
        return queue
    }
}
