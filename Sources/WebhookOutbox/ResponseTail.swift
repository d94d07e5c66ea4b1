import AsyncHTTPClient
import NIOCore
import NIOHTTP1

/// Takes an attempt's answer: its status and headers, and only the last bytes of its body — a
/// receiver that answers with megabytes costs the outbox a bounded buffer, not the megabytes.
final class ResponseTail: HTTPClientResponseDelegate, @unchecked Sendable {
    // @unchecked: AsyncHTTPClient calls a delegate on the request's event loop, one call at a
    // time, and the outbox reads the answer only from the task's future after the last call.
    struct Answer: Sendable {
        var status: HTTPResponseStatus
        var headers: HTTPHeaders
        var tail: [UInt8]
    }

    private let limit: Int
    private var head: HTTPResponseHead?
    private var tail: [UInt8] = []

    init(limit: Int) {
        self.limit = limit
    }

    func didReceiveHead(task: HTTPClient.Task<Answer>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        self.head = head
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Answer>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        tail.append(contentsOf: buffer.readableBytesView.suffix(limit))
        if tail.count > limit { tail.removeFirst(tail.count - limit) }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didFinishRequest(task: HTTPClient.Task<Answer>) throws -> Answer {
        // AsyncHTTPClient finishes a request only after its head arrived.
        guard let head else { throw HTTPClientError.remoteConnectionClosed }
        return Answer(status: head.status, headers: head.headers, tail: tail)
    }
}
