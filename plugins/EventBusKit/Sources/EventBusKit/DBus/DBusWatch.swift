/// What a D-Bus source follows: the options of the shared `dbus` source kind — a bus, the
/// signals it takes (a ``DBusMatch``), and optionally a ``DBusPreset`` that turns them into
/// named events.
///
/// Equal watches share one source; every watch of one ``DBusBus`` shares the host's one
/// connection to that bus. The ``description`` is part of the source id, so it is canonical:
/// `bus=system match=interface=org.freedesktop.login1.Manager,member=PrepareForSleep`, or
/// `bus=system preset=sleep`.
///
/// ```swift
/// let watch = DBusWatch(match: DBusMatch(interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep"))
/// let sleep = DBusWatch(preset: .sleep)
/// ```
public struct DBusWatch: SourceOptions, Codable {
    public static let kind = "dbus"

    public var bus: DBusBus
    /// The signals it takes; a preset's own match for a preset watch.
    public var match: DBusMatch
    /// Posts the preset's events instead of `dbus.signal`; nil for a plain watch.
    public var preset: DBusPreset?

    /// `dbus.signal` for each signal `match` takes on `bus`.
    public init(bus: DBusBus = .system, match: DBusMatch) {
        self.bus = bus
        self.match = match
        self.preset = nil
    }

    /// The preset's events, from its bus (the system bus) or another one carrying the same
    /// service (a container's system bus at an address).
    public init(preset: DBusPreset, bus: DBusBus? = nil) {
        self.bus = bus ?? preset.bus
        self.match = preset.match
        self.preset = preset
    }

    /// `bus=system match=interface=…,member=…` (`match=*` for every signal), or
    /// `bus=system preset=sleep`: the part of the source id after `dbus:`.
    public var description: String {
        if let preset { return "bus=\(bus) preset=\(preset.rawValue)" }
        return "bus=\(bus) match=\(match.text.isEmpty ? "*" : match.text)"
    }

    /// Throws ``EventBusError/Code/invalidDBusWatch`` for what the bus would refuse or what
    /// could never match: a malformed match (``DBusMatch/validate()``), an address without a
    /// transport, a preset whose match was changed.
    public func validate() throws {
        try bus.validate()
        try match.validate()
        if let preset, match != preset.match {
            throw EventBusError(.invalidDBusWatch,
                "the \(preset.rawValue) preset takes its own match (\(preset.match.text)), not \(match.text)")
        }
    }

    /// The events its source posts, for the subscription: the preset's, or `dbus.signal`; and `dbus.gap`.
    var eventPatterns: [EventPattern] {
        let names = preset?.eventNames ?? [DBusSignal.eventName]
        return (names + [DBusGap.eventName]).map { try! EventPattern($0) }
    }
}

extension DBusWatch {
    private enum CodingKeys: String, CodingKey { case bus, match, preset }

    /// `{"bus": "system", "preset": "sleep"}` or `{"bus": …, "match": {…}}`, read back through
    /// ``validate()``: a watch forwarded from a module worker is checked as a module's own.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let bus = try container.decode(DBusBus.self, forKey: .bus)
        if let preset = try container.decodeIfPresent(DBusPreset.self, forKey: .preset) {
            self.init(preset: preset, bus: bus)
            if let match = try container.decodeIfPresent(DBusMatch.self, forKey: .match) { self.match = match }
        } else {
            self.init(bus: bus, match: try container.decode(DBusMatch.self, forKey: .match))
        }
        try validate()
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(bus, forKey: .bus)
        if let preset { try container.encode(preset, forKey: .preset) } else { try container.encode(match, forKey: .match) }
    }
}

extension Bus {
    /// `dbus.signal` for each signal `match` takes on `bus`, and `dbus.gap` after the bus was
    /// away (``DBusSignal`` has the fields and how arguments are flattened, ``DBusGap`` the
    /// notice). Signals arrive once each, in the order the bus delivered them. Subscriptions
    /// with equal options share one source; every watch of a bus shares one connection.
    ///
    /// ```swift
    /// let sleeping = try bus.dbus(matching: DBusMatch(interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep"))
    ///     .sink { print($0["arg0"] ?? "?") }
    /// ```
    ///
    /// Throws ``EventBusError/Code/invalidDBusWatch`` for malformed options and
    /// ``EventBusError/Code/sourceUnavailable`` on a bus without the host's D-Bus driver.
    public func dbus(matching match: DBusMatch, bus: DBusBus = .system) throws -> EventPublisher {
        try dbus(DBusWatch(bus: bus, match: match))
    }

    /// A preset's events (``DBusPreset``): `system.sleep`, `session.new`, `network.connectivity`…,
    /// and `dbus.gap`.
    public func dbus(preset: DBusPreset, bus: DBusBus? = nil) throws -> EventPublisher {
        try dbus(DBusWatch(preset: preset, bus: bus))
    }

    /// Like ``dbus(matching:bus:)``, with the options as one value.
    public func dbus(_ watch: DBusWatch) throws -> EventPublisher {
        try watch.validate()
        return try publisher(for: watch.eventPatterns, from: watch)
    }
}

extension DBusWatch {
    /// A watch from one line, as `eventbus tail --dbus` and a rule's `from: {dbus: …}` write it:
    /// the match's keys (`interface=a.b,member=C,arg0=x`, values bare or quoted as in a match
    /// rule), plus `bus=` (`system`, the default; `user`; an address) and `preset=` (instead of
    /// match keys). Throws ``EventBusError/Code/invalidDBusWatch`` saying what is wrong.
    public init(parsing text: String) throws {
        var bus: DBusBus?
        var preset: DBusPreset?
        var matchPairs: [(key: String, value: String)] = []
        for pair in try DBusMatchRuleSyntax.pairs(of: text) {
            switch pair.key {
            case "bus":
                guard bus == nil else { throw EventBusError(.invalidDBusWatch, "bus is given twice") }
                bus = try DBusBus(parsing: pair.value)
            case "preset":
                guard preset == nil else { throw EventBusError(.invalidDBusWatch, "preset is given twice") }
                preset = try DBusPreset(named: pair.value)
            default:
                matchPairs.append(pair)
            }
        }
        if let preset {
            guard matchPairs.isEmpty else {
                throw EventBusError(.invalidDBusWatch, "preset=\(preset.rawValue) brings its own match (\(preset.match.text)); give no match keys with it")
            }
            self.init(preset: preset, bus: bus)
        } else {
            self.init(bus: bus ?? .system, match: try DBusMatch(pairs: matchPairs))
        }
        try validate()
    }
}
