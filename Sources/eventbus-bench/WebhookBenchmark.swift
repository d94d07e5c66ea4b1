import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import WebhookOutbox
import SystemCalls

// Webhook benchmark: `deliveries` webhooks through the durable outbox to a local receiver,
// against the anchor a shell script would be — a `curl` loop posting the same requests, one
// process each — to the same receiver in the same run. Each request is a POST of a ~90-byte JSON
// event with `Content-Type` and `Idempotency-Key`.
//
// - outbox: timed from the first `enqueue` to the last `.delivered` report, so it includes each
//   delivery's file written and synced (the outbox folder is on the disk `NSTemporaryDirectory()`
//   is, as a state directory would be — not tmpfs, whose syncs cost nothing), the attempt, the
//   answer and the file's removal. Enqueued from 4 threads (rules fire on several queues) and,
//   as a second row, from 1.
//   The enqueues' own rate is printed beside it: each returns once its file is synced, so on a
//   busy disk one enqueuing thread is bound by two journal commits per delivery.
// - curl loop: `/bin/sh` running `curl -s -o /dev/null` N times, timed around the script.
//
// The receiver is SwiftNIO's HTTP/1.1 server on its own event-loop thread in this process,
// answering 200 "ok" and recording each key; `python` instead runs the tests' Python receiver
// (Tests/Fixtures/webhook-receiver) to show what a slow receiver does to both.

func webhookBenchmark(deliveries: Int, python: Bool) async {
    let folder = NSTemporaryDirectory() + "eventbus-bench-webhook-\(getpid())"
    try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
    defer { try? FileManager.default.removeItem(atPath: folder) }
    let receiver: BenchReceiver
    do { receiver = python ? try PythonReceiver(folder: folder) : try NIOReceiver() } catch {
        print("cannot start the receiver: \(error)")
        exit(1)
    }
    defer { receiver.stop() }
    print("webhook benchmark: \(deliveries) deliveries per run, receiver: \(receiver.name), outbox folder \(folder), "
          + "\(ProcessInfo.processInfo.activeProcessorCount) cores")
    let body = Array(#"{"name":"disk.full","source":"bench","fields":{"mount":"/var","used_percent":97}}"#.utf8)

    var rows: [(label: String, seconds: Double, enqueueing: Double?, received: Int)] = []
    for threads in [4, 1] {
        let before = receiver.keys
        let (seconds, enqueueing) = await outboxRun(deliveries: deliveries, threads: threads, body: body, url: receiver.url,
                                                    folder: folder + "/outbox-\(threads)")
        rows.append(("outbox, enqueued from \(threads) thread\(threads == 1 ? "" : "s")", seconds, enqueueing, receiver.keys - before))
    }
    let before = receiver.keys
    let curlSeconds = curlRun(deliveries: deliveries, body: body, url: receiver.url, folder: folder)
    rows.append(("curl loop", curlSeconds, nil, receiver.keys - before))

    let anchor = Double(deliveries) / curlSeconds
    print("")
    print("| run | deliveries | seconds | deliveries/s | × curl loop | enqueues/s (durable) | distinct keys received |")
    print("|---|---|---|---|---|---|---|")
    for row in rows {
        let rate = Double(deliveries) / row.seconds
        let enqueues = row.enqueueing.map { String(format: "%.0f", Double(deliveries) / $0) } ?? ""
        print("| \(row.label) | \(deliveries) | \(String(format: "%.3f", row.seconds)) | \(String(format: "%.0f", rate)) | "
              + "\(String(format: "%.1f×", rate / anchor)) | \(enqueues) | \(row.received) |")
    }
    let best = Double(deliveries) / rows[0].seconds / anchor
    print(String(format: "\noutbox (4 threads) / curl loop: %.1f×  (target ≥ 5×: %@)", best, best >= 5 ? "met" : "MISSED"))
}

/// Seconds from the first enqueue to the last delivery, and to the last enqueue's return.
private func outboxRun(deliveries: Int, threads: Int, body: [UInt8], url: String, folder: String) async -> (Double, Double) {
    var logger = Logger(label: "eventbus-bench")
    logger.logLevel = .warning
    let delivered = NIOLockedValueBox(0)
    let done = DispatchSemaphore(value: 0)
    let outbox = WebhookOutbox(directory: folder, capacity: deliveries, concurrency: 16, logger: logger) { report in
        switch report {
        case .delivered:
            if delivered.withLockedValue({ $0 += 1; return $0 }) == deliveries { done.signal() }
        case .failed(let delivery, let reason, _), .dropped(let delivery, let reason):
            print("webhook \(delivery.id) not delivered: \(reason)")
            exit(1)
        default:
            break
        }
    }
    do { try outbox.start() } catch {
        print("cannot start the outbox: \(error)")
        exit(1)
    }
    let start = ContinuousClock.now
    DispatchQueue.concurrentPerform(iterations: threads) { thread in
        for index in stride(from: thread, to: deliveries, by: threads) {
            _ = outbox.enqueue(WebhookDelivery(id: "bench-\(threads)-\(index)", rule: "bench", runID: String(index), url: url,
                                               headers: [WebhookHeader(name: "Content-Type", value: "application/json")],
                                               body: body))
        }
    }
    let enqueued = ContinuousClock.now - start
    await withCheckedContinuation { continuation in
        Thread.detachNewThread {
            done.wait()
            continuation.resume()
        }
    }
    let elapsed = ContinuousClock.now - start
    await outbox.shutdown(within: .seconds(5))
    return (seconds(elapsed), seconds(enqueued))
}

private func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

/// Seconds for `/bin/sh` to run `curl` `deliveries` times, one request each.
private func curlRun(deliveries: Int, body: [UInt8], url: String, folder: String) -> Double {
    let bodyFile = folder + "/body.json"
    guard FileManager.default.createFile(atPath: bodyFile, contents: Data(body)) else {
        print("cannot write \(bodyFile)")
        exit(1)
    }
    let script = """
        i=0
        while [ $i -lt \(deliveries) ]; do
          curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -H "Idempotency-Key: curl-$i" \
            --data-binary @\(bodyFile) \(url) || exit 1
          i=$((i + 1))
        done
        """
    let shell = Process()
    shell.executableURL = URL(fileURLWithPath: "/bin/sh")
    shell.arguments = ["-c", script]
    let start = ContinuousClock.now
    do { try shell.run() } catch {
        print("cannot run the curl loop: \(error)")
        exit(1)
    }
    shell.waitUntilExit()
    guard shell.terminationStatus == 0 else {
        print("the curl loop failed (is curl installed?)")
        exit(1)
    }
    return seconds(ContinuousClock.now - start)
}

/// A local webhook receiver: where to post, and how many distinct keys it has seen.
private protocol BenchReceiver {
    var name: String { get }
    var url: String { get }
    var keys: Int { get }
    func stop()
}

/// SwiftNIO's HTTP/1.1 server on one event-loop thread: answers every request 200 "ok", keep-alive.
private final class NIOReceiver: BenchReceiver {
    let name = "SwiftNIO HTTP/1.1 server (1 event-loop thread, in this process)"
    let url: String
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private let channel: any Channel
    private let seen = NIOLockedValueBox(Set<String>())

    init() throws {
        let seen = seen
        channel = try ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(OKHandler(seen: seen))
                }
            }
            .bind(host: "127.0.0.1", port: 0).wait()
        url = "http://127.0.0.1:\(channel.localAddress?.port ?? 0)/hook"
    }

    var keys: Int { seen.withLockedValue { $0.count } }

    func stop() {
        try? channel.close().wait()
        try? group.syncShutdownGracefully()
    }

    private final class OKHandler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        private let seen: NIOLockedValueBox<Set<String>>
        private var key: String?

        init(seen: NIOLockedValueBox<Set<String>>) {
            self.seen = seen
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                key = head.headers.first(name: "Idempotency-Key")
            case .body:
                break
            case .end:
                if let key { _ = seen.withLockedValue { $0.insert(key) } }
                let head = HTTPResponseHead(version: .http1_1, status: .ok, headers: ["Content-Length": "2"])
                context.write(wrapOutboundOut(.head(head)), promise: nil)
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: "ok")))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}

/// The tests' receiver (Python's ThreadingHTTPServer), as a child process.
private final class PythonReceiver: BenchReceiver {
    let name = "Tests/Fixtures/webhook-receiver/receiver.py (Python ThreadingHTTPServer)"
    let url: String
    private let process = Process()
    private let log: String

    init(folder: String) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Tests/Fixtures/webhook-receiver/receiver.py").path
        log = folder + "/receiver.log"
        let ready = folder + "/receiver.port"
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [script, "--log", log, "--ready", ready]
        try process.run()
        let deadline = ContinuousClock.now + .seconds(30)
        while !FileManager.default.fileExists(atPath: ready) {
            guard process.isRunning, ContinuousClock.now < deadline else { throw POSIXError(.ETIMEDOUT) }
            System.sleep(for: .microseconds(10_000))
        }
        url = "http://127.0.0.1:\((try? String(contentsOfFile: ready, encoding: .utf8)) ?? "0")/hook"
    }

    var keys: Int {
        guard let data = FileManager.default.contents(atPath: log) else { return 0 }
        return Set(data.split(separator: UInt8(ascii: "\n")).compactMap { line in
            ((try? JSONSerialization.jsonObject(with: Data(line))) as? [String: Any])?["key"] as? String
        }).count
    }

    func stop() {
        try? System.sendSignal(SIGKILL, to: process.processIdentifier)
        process.waitUntilExit()
    }
}
