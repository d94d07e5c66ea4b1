import Foundation
import Logging
import WebhookOutbox

// The first life of the outbox durability tests:
//   webhook-outbox-fixture FOLDER COUNT URL
// starts an outbox on FOLDER, enqueues COUNT deliveries (ids key-0 … key-COUNT-1) to URL — where
// nobody listens yet, so each waits to retry — printing `queued ID` on standard output as each
// enqueue returns, then `all queued`, and waits to be SIGKILLed.
let arguments = CommandLine.arguments
guard arguments.count == 4, let count = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: webhook-outbox-fixture FOLDER COUNT URL\n".utf8))
    exit(2)
}
LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
let outbox = WebhookOutbox(directory: arguments[1], capacity: count + 1, concurrency: 4,
                           logger: Logger(label: "webhook-outbox-fixture"),
                           backoff: WebhookBackoff(base: .seconds(5), cap: .seconds(5))) { _ in }
do { try outbox.start() } catch {
    FileHandle.standardError.write(Data("cannot start: \(error)\n".utf8))
    exit(1)
}
for index in 0..<count {
    let id = "key-\(index)"
    let delivery = WebhookDelivery(id: id, rule: "fixture", runID: "run-\(index)", url: arguments[3],
                                   headers: [WebhookHeader(name: "Content-Type", value: "application/json")],
                                   body: Array(#"{"event":"fixture.tick","n":\#(index)}"#.utf8),
                                   attemptTimeout: .seconds(2),
                                   // Never given up in this life, however long a loaded machine
                                   // takes to enqueue them all before the kill.
                                   maxAttempts: 1_000_000)
    guard outbox.enqueue(delivery) else {
        FileHandle.standardError.write(Data("dropped \(id)\n".utf8))
        exit(1)
    }
    FileHandle.standardOutput.write(Data("queued \(id)\n".utf8))
}
FileHandle.standardOutput.write(Data("all queued\n".utf8))
while true { sleep(60) }
