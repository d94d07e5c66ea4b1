import EventBusKit

/// Alerts on two patterns of trouble with systemd units, from their state changes and the files
/// they read:
/// - `alert.unit.flapping`: a unit started more than `max_starts` times within `window_seconds`
///   (a crash loop that `Restart=` keeps alive, which systemctl shows as "active" half the time);
/// - `alert.unit.failed_after_change`: a unit failed within `window_seconds` after a file under
///   `config_paths` changed (the config edit that broke it); once per unit and change.
///
/// The pipeline, in Combine terms: the units source (`bus.units(matching:)`) and one files source
/// per config path are **merged** into one stream of inputs, folded with **scan** into the
/// ``AlertRules`` state, whose alerts are **flatMap**ped out and posted. Both sources reach the
/// module through its mailbox in bus order, so "after a change" means after in the bus's order.
final class UnitAlerts: EventBusModule {
    let name = "unit-alerts"
    let version = "1.0.0"
    /// What its config section may hold; the host refuses anything else, with file and line.
    static let configKeys: ModuleConfigKeys = [
        .strings("units", default: ["*.service"], help: "the units watched (globs, as systemctl list-units takes them)"),
        .int("max_starts", default: 3, minimum: 1, help: "starts within the window above which a unit is flapping"),
        .double("window_seconds", default: 300, minimum: 0.001, maximum: 86_400, help: "the window of both rules"),
        .strings("config_paths", default: [], help: "absolute paths (files or folders, watched recursively) whose changes precede failures"),
    ]

    func activate(_ context: ModuleContext) throws {
        let config = context.config
        let rules = AlertRules(maxStarts: try config.int("max_starts"),
                               windowNanoseconds: UInt64(try config.double("window_seconds") * 1e9))
        let bus = context.bus
        let log = context.log

        var inputs = try bus.units(matching: UnitMatch(try config.strings("units"))).eraseToAnyPublisher()
        for path in try config.strings("config_paths") {
            inputs = inputs.merge(with: try bus.files(at: path, recursive: true)).eraseToAnyPublisher()
        }
        inputs
            .handleEvents(receiveOutput: { event in
                // Blind time is worth a line: a flap or failure in it is seen only as its resync.
                if let gap = event.unitsGap { log.warning("units: \(gap.reason)") }
            })
            .scan(rules) { rules, event in
                var rules = rules
                rules.take(event)
                return rules
            }
            .flatMap { $0.alerts.publisher }
            .sink { alert in bus.post(alert.name, source: "unit-alerts", fields: alert.fields) }
            .store(in: &context.cancellables)
    }
}

/// The state of both rules, and the alerts the last input raised. Pure: fed events, no clock
/// of its own (an event's monotonic time is when it happened).
struct AlertRules {
    struct Alert: Equatable {
        var name: String
        var fields: [String: FieldValue]
    }

    let maxStarts: Int
    let windowNanoseconds: UInt64
    /// Per unit, when it started (entered `activating`) within the window.
    private var starts: [String: [UInt64]] = [:]
    /// The last change under a config path: when, and which path.
    private var lastChange: (at: UInt64, path: String)?
    /// Units whose failure was put down to the last change already: a crash loop fails again
    /// and again, and one change is one alert per unit.
    private var blamed: Set<String> = []
    /// What the last input raised.
    private(set) var alerts: [Alert] = []

    init(maxStarts: Int, windowNanoseconds: UInt64) {
        self.maxStarts = maxStarts
        self.windowNanoseconds = windowNanoseconds
    }

    mutating func take(_ event: Event) {
        alerts = []
        let now = event.monotonicNanoseconds
        if event.name.hasPrefix("fs."), let path = event["path"]?.stringValue {
            lastChange = (now, path)
            blamed = []
            return
        }
        // Snapshots are where units are, not what they did; resyncs may stand for several starts.
        guard let state = event.unitState, state.origin == .change, let old = state.old else { return }
        if state.new.activeState == "activating" && old.activeState != "activating" {
            var recent = (starts[state.unit] ?? []).filter { Self.elapsed(from: $0, to: now) <= windowNanoseconds }
            recent.append(now)
            if recent.count > maxStarts {
                alerts.append(Alert(name: "alert.unit.flapping", fields: [
                    "unit": .string(state.unit), "starts": .int(Int64(recent.count)),
                    "window_seconds": .double(Double(windowNanoseconds) / 1e9),
                ]))
                recent = []  // once per burst: counting starts again
            }
            starts[state.unit] = recent
        }
        if state.failed, let change = lastChange, Self.elapsed(from: change.at, to: now) <= windowNanoseconds,
           blamed.insert(state.unit).inserted {
            var fields: [String: FieldValue] = [
                "unit": .string(state.unit), "path": .string(change.path),
                "seconds_after_change": .double(Double(Self.elapsed(from: change.at, to: now)) / 1e9),
            ]
            if let result = state.new.result { fields["result"] = .string(result) }
            alerts.append(Alert(name: "alert.unit.failed_after_change", fields: fields))
        }
    }

    /// Two sources' events are in bus order, and their times may be a hair out of it.
    private static func elapsed(from start: UInt64, to end: UInt64) -> UInt64 {
        end > start ? end - start : 0
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(UnitAlerts.init) }
