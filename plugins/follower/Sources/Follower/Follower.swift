import EventBusKit
import Foundation

/// Follows one *target* at a time — the events of a bus pattern, the file changes under a path,
/// or a unit's journal — and re-posts those that meet a field condition as `follower.match`. What
/// it follows is named by a config file (`target_file`), by `user.follow.set` events, or at first
/// by the config (`target`), and can change while the module runs.
///
/// The pipeline, in Combine terms:
/// - the stream of targets **merges** the config's initial target, the target file's content
///   (read at activation and again on every change the file watch reports) and the targets that
///   `user.follow.set` events carry;
/// - **debounce** on the module's queue coalesces a burst of changes into the last one;
/// - each target becomes the publisher of its events (``events(of:on:)``); one whose source
///   cannot start is refused there with a warning, so the previous target stays followed;
/// - **switchToLatest** keeps only the newest subscribed: switching cancels the previous
///   subscription, so nothing of an old target arrives after the switch;
/// - **filter** keeps the events that meet the condition (source notices are logged instead).
final class Follower: EventBusModule {
    let name = "follower"
    let version = "1.1.0"
    /// What its config section may hold; the host refuses anything else, with file and line.
    static let configKeys: ModuleConfigKeys = [
        .string("target", help: "what to follow first: a bus pattern, file:PATH or journal:UNIT"),
        .string("target_file", help: "an absolute path to a file whose first line names the target"),
        .int("debounce_ms", default: 200, minimum: 0, help: "how long target changes settle before a switch"),
        .string("field", help: "the event field the condition tests"),
        .string("equals", help: "matches when the field, as text, is exactly this"),
        .string("contains", help: "matches when the field, as text, contains this"),
    ]

    /// The one place a target becomes events: a bus pattern, `bus.files(at:recursive:)` for a
    /// `file:` target, `bus.journal(matching:)` for a `journal:` one.
    ///
    /// Throws when the source cannot start: `.sourceUnavailable` on a host without that kind of
    /// source, `.invalidFilePath` for a path that does not exist. The files source would only
    /// say the latter later, as an `fs.error` event; it is checked here so that such a target is
    /// refused before the switch, and the current one kept.
    static func events(of target: Target, on bus: Bus) throws -> EventPublisher {
        switch target {
        case .events(let pattern):
            return bus.publisher(for: pattern)
        case .files(let path):
            guard FileManager.default.fileExists(atPath: path) else {
                throw EventBusError(.invalidFilePath, "\(path) does not exist")
            }
            return try bus.files(at: path, recursive: true)
        case .journal(let unit):
            return try bus.journal(matching: .unit(unit))
        }
    }

    func activate(_ context: ModuleContext) throws {
        let settings = try Settings(context.config)
        let bus = context.bus
        let log = context.log

        let requested = try bus.publisher(for: "user.follow.set")
            .compactMap { event -> String? in
                guard let target = event["target"]?.stringValue else {
                    log.warning("user.follow.set #\(event.sequence) has no string field \"target\"; ignored")
                    return nil
                }
                return target
            }
        let named: AnyPublisher<String, Never> = settings.targetFile.map {
            TargetFile(path: $0, log: log).targets(on: bus)
        } ?? Empty().eraseToAnyPublisher()

        // What is followed now; only touched on the module's queue, as every stage below runs there.
        let following = Following()
        settings.initialTargets.publisher
            .merge(with: named, requested)
            .debounce(for: .milliseconds(settings.debounceMilliseconds), scheduler: context.queue.ocombine)
            .compactMap { text -> (Target, EventPublisher)? in
                let target: Target
                do { target = try Target(text) } catch {
                    log.warning("target refused, still following \(following.name): \(error)")
                    return nil
                }
                guard target != following.current else { return nil }
                do {
                    let events = try Follower.events(of: target, on: bus)
                    following.current = target
                    return (target, events)
                } catch {
                    // Refused before switchToLatest sees it: the current subscription stays.
                    log.warning("cannot follow \(target), still following \(following.name): \(error)")
                    return nil
                }
            }
            .map { target, events in
                events
                    // Announced once the new subscription is in place, so whoever waits for it
                    // knows that every event posted from then on is seen.
                    .handleEvents(receiveSubscription: { _ in
                        log.info("following \(target)")
                        bus.post("follower.following", source: "follower", fields: ["target": .string(target.description)])
                    })
            }
            .switchToLatest()
            .filter { event in
                // A target such as `>` would otherwise feed the module its own output forever.
                !event.name.hasPrefix("follower.") && !Follower.isNotice(event, log: log)
                    && settings.condition.holds(for: event)
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

    /// Whether `event` says something about the followed source rather than being one of its
    /// events: dropped events (`bus.gap`, `journal.gap`), a file watch's notices (`fs.error`,
    /// `fs.overflow`, `fs.root.deleted`…), `journal.status`. They are logged, never matched.
    private static func isNotice(_ event: Event, log: ModuleLog) -> Bool {
        if let gap = event.gap {
            log.warning("missed \(gap.dropped) events of the target (sequences \(gap.firstSequence)...\(gap.lastSequence))")
            return true
        }
        if let change = event.fileChange, !change.kind.isPathChange {
            let text = "\(change.kind.eventName) \(change.path): \(change.message ?? "")"
            switch change.kind {
            case .rescanned, .rootRearmed: log.info(text)
            default: log.warning(text)
            }
            return true
        }
        if let gap = event.journalGap {
            log.warning("journal entries of the target were lost (after cursor \(gap.lostCursor))")
            return true
        }
        if let status = event.journalStatus {
            let text = "journal \(status.state.rawValue): \(status.reason)"
            if status.state == .following { log.info(text) } else { log.warning(text) }
            return true
        }
        return false
    }
}

/// What the module follows.
enum Target: Hashable, CustomStringConvertible {
    /// Bus events whose names match the pattern.
    case events(EventPattern)
    /// `file:PATH`: changes to the file or anywhere in the directory tree at the absolute path.
    case files(path: String)
    /// `journal:UNIT`: the journal entries of a systemd unit.
    case journal(unit: String)

    /// `file:/srv/app`, `journal:nginx.service`, or else an event pattern (`app.web.>`).
    init(_ text: String) throws {
        if text.hasPrefix("file:") {
            let path = String(text.dropFirst("file:".count))
            guard path.hasPrefix("/") else {
                throw EventBusError(.invalidFilePath, "\"\(text)\": a file target needs an absolute path (file:/path)")
            }
            self = .files(path: path)
        } else if text.hasPrefix("journal:") {
            let unit = String(text.dropFirst("journal:".count))
            guard !unit.isEmpty, !unit.contains(where: \.isWhitespace) else {
                throw EventBusError(.invalidJournalWatch, "\"\(text)\": a journal target needs a unit name (journal:x.service)")
            }
            self = .journal(unit: unit)
        } else {
            self = .events(try EventPattern(text))
        }
    }

    var description: String {
        switch self {
        case .events(let pattern): return pattern.description
        case .files(let path): return "file:\(path)"
        case .journal(let unit): return "journal:\(unit)"
        }
    }
}

/// The target currently subscribed, for the module's queue only.
private final class Following {
    var current: Target?
    var name: String { current?.description ?? "nothing" }
}

/// The `target_file` key: a file whose first non-empty line names the target.
///
/// Watched with `bus.files(at:rearmWhenRecreated: true)` and read again when a write is done
/// (`fs.closed`), when it is replaced by a rename or recreated (`fs.root.rearmed`: the watch
/// re-armed on the new file), when it (re)appears (`fs.created`, `fs.moved`) and after events
/// were lost (`fs.rescanned`, `bus.gap`). `fs.modified` is not a trigger: a write in progress
/// ends with `fs.closed`. While the file is gone the current target stays.
struct TargetFile {
    /// Read at most this much: the target is on the first line.
    static let readLimit = 64 * 1024

    let path: String
    let log: ModuleLog

    /// The targets the file names: its content now, then after every change. Subscribes to the
    /// watch before the first read, so a change after that read is reported by the watch (from
    /// the moment the kernel watch is armed, which the files source does at once).
    func targets(on bus: Bus) -> AnyPublisher<String, Never> {
        let now = Deferred { [self] in Just(read()) }.compactMap { $0 }
        do {
            return try bus.files(at: path, rearmWhenRecreated: true)
                .compactMap { [self] event -> String? in
                    guard reReads(after: event) else { return nil }
                    return read()
                }
                .merge(with: now)
                .eraseToAnyPublisher()
        } catch {
            log.warning("cannot watch target_file \(path) (\(error)); read once now, later changes are not seen")
            return now.eraseToAnyPublisher()
        }
    }

    /// Whether the file may have new content after `event` (and logs what needs saying).
    private func reReads(after event: Event) -> Bool {
        if let gap = event.gap {
            log.warning("missed \(gap.dropped) change(s) of target_file \(path); reading it again")
            return true
        }
        guard let change = event.fileChange else { return false }
        switch change.kind {
        case .closedAfterWrite, .created, .moved, .rootRearmed, .rescanned:
            return true
        case .modified, .attributes, .overflow:
            return false
        case .deleted, .rootDeleted:
            log.warning("target_file \(path) is gone; keeping the current target until it is back")
            return false
        case .error:
            log.warning("target_file: \(change.message ?? change.path)")
            return false
        }
    }

    /// The first non-empty line, trimmed; nil (with a warning) if the file cannot be read or
    /// names nothing.
    func read() -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            log.warning("cannot read target_file \(path); keeping the current target")
            return nil
        }
        defer { try? handle.close() }
        let data: Data
        do { data = try handle.read(upToCount: Self.readLimit) ?? Data() } catch {
            log.warning("cannot read target_file \(path) (\(error)); keeping the current target")
            return nil
        }
        let text = String(decoding: data, as: UTF8.self)
        let line = text.split(whereSeparator: \.isNewline)
            .lazy.map { $0.trimmingCharacters(in: .whitespaces) }
            .first { !$0.isEmpty }
        guard let line else {
            log.warning("target_file \(path) names no target; keeping the current target")
            return nil
        }
        return line
    }
}

/// The module's config section, checked once at activation so a bad value refuses the module
/// with a message instead of failing later.
struct Settings {
    /// Zero or one target: with none, the module follows nothing until one is named.
    var initialTargets: [String]
    /// The absolute path of the file that names the target, if any.
    var targetFile: String?
    var debounceMilliseconds: Int
    var condition: Condition

    init(_ config: ModuleConfig) throws {
        initialTargets = try config["target"] == nil ? [] : [config.string("target")]
        targetFile = try config["target_file"] == nil ? nil : config.string("target_file")
        if let targetFile, !targetFile.hasPrefix("/") {
            throw EventBusError(.invalidModuleConfig, "key \"target_file\" must be an absolute path, not \"\(targetFile)\"")
        }
        debounceMilliseconds = try config.int("debounce_ms")
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
