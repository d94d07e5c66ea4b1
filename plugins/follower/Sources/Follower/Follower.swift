import EventBusKit

/// Follows one *target* at a time — the events matching a pattern — and re-posts those that meet
/// a field condition as `follower.match`. The target can change while the module runs.
///
/// The pipeline, in Combine terms:
/// - the stream of targets is the config's initial target **merged** with the targets that
///   `user.follow.set` events carry;
/// - **debounce** on the module's queue coalesces a burst of changes into the last one;
/// - each target becomes the publisher of its events, and **switchToLatest** keeps only the
///   newest subscribed: switching cancels the previous subscription, so nothing of an old target
///   arrives after the switch;
/// - **filter** keeps the events that meet the condition.
final class Follower: EventBusModule {
    let name = "follower"
    let version = "1.0.0"

    /// The only stand-in for a real source: today a target is an event pattern on the bus. When
    /// file and journal sources exist, a target names a file or a journal match instead, and only
    /// this function changes (to `bus.files(at:)` / `bus.journal(matching:)`).
    private static func events(of target: EventPattern, on bus: Bus) -> EventPublisher {
        bus.publisher(for: target)
    }

    func activate(_ context: ModuleContext) throws {
        let settings = try Settings(context.config)
        let bus = context.bus

        let requested = try bus.publisher(for: "user.follow.set")
            .compactMap { event -> String? in
                guard let target = event["target"]?.stringValue else {
                    context.log.warning("user.follow.set #\(event.sequence) has no string field \"target\"; ignored")
                    return nil
                }
                return target
            }

        settings.initialTargets.publisher
            .merge(with: requested)
            .debounce(for: .milliseconds(settings.debounceMilliseconds), scheduler: context.queue.ocombine)
            .compactMap { text -> EventPattern? in
                do { return try EventPattern(text) } catch {
                    context.log.warning("target refused, still following the previous one: \(error)")
                    return nil
                }
            }
            .removeDuplicates()
            .map { target in
                Follower.events(of: target, on: bus)
                    // Announced once the new subscription is in place, so whoever waits for it
                    // knows that every event posted from then on is seen.
                    .handleEvents(receiveSubscription: { _ in
                        context.log.info("following \(target)")
                        bus.post("follower.following", source: "follower", fields: ["target": .string(target.description)])
                    })
            }
            .switchToLatest()
            .filter { event in
                if let gap = event.gap {
                    context.log.warning("missed \(gap.dropped) events of the target (sequences \(gap.firstSequence)...\(gap.lastSequence))")
                    return false
                }
                // A target such as `>` would otherwise feed the module its own output forever.
                return !event.name.hasPrefix("follower.") && settings.condition.holds(for: event)
            }
            .sink { event in
                var fields = event.fields
                fields["matched_name"] = .string(event.name)
                fields["matched_source"] = .string(event.source)
                fields["matched_sequence"] = .int(Int64(event.sequence))
                bus.post("follower.match", source: "follower", fields: fields)
            }
            .store(in: &context.cancellables)
    }
}

/// The module's config section, checked once at activation so a bad value refuses the module
/// with a message instead of failing later.
struct Settings {
    /// Zero or one pattern: with none, the module follows nothing until `user.follow.set`.
    var initialTargets: [String]
    var debounceMilliseconds: Int
    var condition: Condition

    init(_ config: ModuleConfig) throws {
        initialTargets = try config["target"] == nil ? [] : [config.string("target")]
        debounceMilliseconds = try config.int("debounce_ms", default: 200)
        guard debounceMilliseconds >= 0 else {
            throw EventBusError(.invalidModuleConfig, "key \"debounce_ms\" must be 0 or more, not \(debounceMilliseconds)")
        }
        condition = try Condition(config)
    }
}

/// Which followed events count as matches.
enum Condition {
    /// No `field` configured: every followed event.
    case always
    /// `field` alone: events that have the field.
    case exists(field: String)
    /// `field` with `equals`: events whose field, as text, is exactly this.
    case equals(field: String, text: String)
    /// `field` with `contains`: events whose field, as text, contains this.
    case contains(field: String, text: String)

    init(_ config: ModuleConfig) throws {
        let field = config["field"] == nil ? nil : try config.string("field")
        let equals = config["equals"] == nil ? nil : try config.string("equals")
        let contains = config["contains"] == nil ? nil : try config.string("contains")
        switch (field, equals, contains) {
        case (nil, nil, nil): self = .always
        case (nil, _, _): throw EventBusError(.invalidModuleConfig, "\"equals\" and \"contains\" need \"field\": the field to test")
        case (_?, _?, _?): throw EventBusError(.invalidModuleConfig, "give \"equals\" or \"contains\", not both")
        case (let field?, let text?, nil): self = .equals(field: field, text: text)
        case (let field?, nil, let text?): self = .contains(field: field, text: text)
        case (let field?, nil, nil): self = .exists(field: field)
        }
    }

    func holds(for event: Event) -> Bool {
        switch self {
        case .always: return true
        case .exists(let field): return event[field] != nil
        case .equals(let field, let text): return event[field]?.description == text
        case .contains(let field, let text): return event[field]?.description.contains(text) ?? false
        }
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Follower.init) }
