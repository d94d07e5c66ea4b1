import EventBusKit

/// Test fixture: follows the journal files in its `directory` from the head as consumer
/// `consumer`, acknowledges every entry and posts `result.acked` with its message — or
/// `result.ack_failed` with the error.
final class JournalAck: EventBusModule {
    let name = "fixture-journal-ack"
    let version = "1.0.0"
    static let configKeys: ModuleConfigKeys = [
        .string("directory", required: true, help: "the journal files to follow"),
        .string("consumer", required: true, help: "the consumer name its position persists under"),
    ]

    func activate(_ context: ModuleContext) throws {
        let directory = try context.config.string("directory")
        let consumer = try context.config.string("consumer")
        let bus = context.bus
        try bus.journal(matching: .all, from: .directory(directory), start: .head, consumer: consumer)
            .sink { event in
                guard let entry = event.journalEntry else { return }
                do {
                    try bus.acknowledge(entry)
                    bus.post("result.acked", source: "journal-ack", fields: ["message": .string(entry.message)])
                } catch {
                    bus.post("result.ack_failed", source: "journal-ack", fields: ["error": .string("\(error)")])
                }
            }
            .store(in: &context.cancellables)
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(JournalAck.init) }
