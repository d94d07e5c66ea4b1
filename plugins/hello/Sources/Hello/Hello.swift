import EventBusKit

/// The smallest useful module: greets every user event in the log and answers it on the bus with
/// a `hello.greeted` event, so whoever posted can see that a loaded module handled it.
final class Hello: EventBusModule {
    let name = "hello"
    let version = "1.0.0"
    /// What its config section may hold; the host refuses anything else (a typo included).
    static let configKeys: ModuleConfigKeys = [
        .string("greeting", default: "hello", help: "the word it greets with"),
    ]

    func activate(_ context: ModuleContext) throws {
        let greeting = try context.config.string("greeting")
        // The reply is not under `user.>`, so the module never hears its own answers.
        try context.bus.publisher(for: "user.>")
            .sink { event in
                context.log.info("\(greeting), \(event.name) from \(event.source)")
                context.bus.post("hello.greeted", source: "hello", fields: [
                    "greeting": .string(greeting),
                    "event": .string(event.name),
                    "event_sequence": .int(Int64(event.sequence)),
                ])
            }
            .store(in: &context.cancellables)
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Hello.init) }
