import EventBusKit
@testable import EventSources
import Foundation
import SystemCalls
import SystemdBus
import Testing
import TestSupport

/// The D-Bus source against a real dbus-daemon of each test's own: signals sent by `busctl
/// emit` and by an sd-bus client of the test arrive as typed fields, once, in order; matching
/// on arguments with hostile values; two watches on one connection; sender-bound watches and
/// presets; a bus that dies and comes back, or is not there yet.
@Suite struct DBusSourceTests {
    private static let busctl = "/usr/bin/busctl"
    private static let test = DBusMatch(interface: "org.eventbus.Test")

    private func busctl(_ daemon: DBusPrivateDaemon, _ arguments: [String]) async throws {
        let result = try await run(Self.busctl, ["--address=\(daemon.address)", "emit"] + arguments)
        guard result.status == 0 else { throw DBusTestFailure("busctl emit \(arguments): \(result.output)") }
    }

    /// A recorder following `watch` on `daemon`, past its first probe.
    private func listening(_ watch: DBusWatch, on daemon: DBusPrivateDaemon, emitter: DBusTestEmitter,
                           probe: (SDBusMessageWriter) throws(SDBusError) -> Void = { _ in }) async throws -> DBusRecorder {
        let recorder = DBusRecorder()
        try recorder.follow(watch)
        let listening: Bool
        do {
            listening = try await recorder.waitUntilListening { try emitter.emit(member: "Probe", probe) }
        } catch {
            throw DBusTestFailure("\(error); the bus daemon: \(daemon.condition)")
        }
        try #require(listening, "the watch never received a probe: \(recorder.state(of: watch) ?? "no state"); the bus daemon: \(daemon.condition)")
        return recorder
    }

    @Test func everyBasicTypeArrivesAsItsNaturalField() async throws {
        let daemon = try DBusPrivateDaemon()
        let emitter = try DBusTestEmitter(address: daemon.address)
        let watch = DBusWatch(bus: .address(daemon.address), match: Self.test)
        let recorder = try await listening(watch, on: daemon, emitter: emitter)
        try await busctl(daemon, ["/eventbus/basic", "org.eventbus.Test", "Basic", "ybnqiuxtdsog", "--",
                                  "255", "true", "-32768", "65535", "-2147483648", "4294967295", "-9223372036854775808",
                                  "18446744073709551615", "-1.5", "it's \"quoted\", with\\backslash", "/org/eventbus/x", "a{sv}"])
        try await busctl(daemon, ["/eventbus/basic", "org.eventbus.Test", "Basic", "t", "9223372036854775807"])
        #expect(await eventually { recorder.signals().filter { $0.member == "Basic" }.count == 2 })
        let signals = recorder.signals().filter { $0.member == "Basic" }
        let first = try #require(signals.first)
        #expect(first.path == "/eventbus/basic" && first.interface == "org.eventbus.Test" && first.signature == "ybnqiuxtdsog")
        #expect(first.sender.hasPrefix(":1."))
        let expected: [String: FieldValue] = [
            "arg0": .int(255), "arg1": .bool(true), "arg2": .int(-32768), "arg3": .int(65535), "arg4": .int(-2147483648),
            "arg5": .int(4294967295), "arg6": .int(Int64.min), "arg7": .string("18446744073709551615"), "arg8": .double(-1.5),
            "arg9": .string("it's \"quoted\", with\\backslash"), "arg10": .string("/org/eventbus/x"), "arg11": .string("a{sv}"),
        ]
        #expect(first.arguments == expected)
        #expect(first.unrepresented.isEmpty)
        #expect(signals.last?.arguments == ["arg0": .int(Int64.max)])
        let event = try #require(recorder.events().first { $0.dbusSignal?.member == "Basic" })
        #expect(event.name == "dbus.signal" && event.source == "dbus:\(watch)" && event["unrepresented"] == nil)
    }

    @Test func containersAreFlattenedAndWhatCannotBeShownIsNamed() async throws {
        let daemon = try DBusPrivateDaemon()
        let emitter = try DBusTestEmitter(address: daemon.address)
        let recorder = try await listening(DBusWatch(bus: .address(daemon.address), match: Self.test), on: daemon, emitter: emitter)
        let descriptor = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { close(descriptor) }
        try emitter.emit(member: "Containers") { (writer) throws(SDBusError) in
            try writer.strings(["a", "b", "c"])                                          // arg0: as
            try writer.container("a", "{sv}") { () throws(SDBusError) in                  // arg1: a{sv}
                try writer.container("e", "sv") { () throws(SDBusError) in
                    try writer.string("Name")
                    try writer.variant(.string("eth0"))
                }
                try writer.container("e", "sv") { () throws(SDBusError) in
                    try writer.string("Address")
                    try writer.container("v", "(su)") { () throws(SDBusError) in
                        try writer.container("r", "su") { () throws(SDBusError) in
                            try writer.string("10.0.0.1")
                            try writer.uint32(24)
                        }
                    }
                }
                try writer.container("e", "sv") { () throws(SDBusError) in
                    try writer.string("Nested")
                    try writer.container("v", "v") { () throws(SDBusError) in try writer.variant(.int32(-7)) }
                }
            }
            try writer.container("r", "sb") { () throws(SDBusError) in                    // arg2: (sb)
                try writer.string("x")
                try writer.bool(false)
            }
            try writer.bytes([0, 1, 0xab, 0xff])                                          // arg3: ay
            try writer.container("a", "{ub}") { () throws(SDBusError) in                  // arg4: a{ub}
                try writer.container("e", "ub") { () throws(SDBusError) in
                    try writer.uint32(7)
                    try writer.bool(true)
                }
            }
            try DBusTestEmitter.appendDescriptor(descriptor, to: writer)                  // arg5: h
            try writer.container("a", "s") { () throws(SDBusError) in }                   // arg6: empty as
            try writer.container("a", "{ss}") { () throws(SDBusError) in }                // arg7: empty a{ss}
            try writer.string("after")                                                    // arg8
        }
        #expect(await eventually { recorder.signals().contains { $0.member == "Containers" } })
        let signal = try #require(recorder.signals().first { $0.member == "Containers" })
        #expect(signal.signature == "asa{sv}(sb)aya{ub}hasa{ss}s")
        #expect(signal.arguments == [
            "arg0.count": .int(3), "arg0.0": .string("a"), "arg0.1": .string("b"), "arg0.2": .string("c"),
            "arg1.Name": .string("eth0"), "arg1.Address.0": .string("10.0.0.1"), "arg1.Address.1": .int(24), "arg1.Nested": .int(-7),
            "arg2.0": .string("x"), "arg2.1": .bool(false),
            "arg3": .string("0001abff"), "arg3.count": .int(4),
            "arg4.7": .bool(true),
            "arg6.count": .int(0),
            "arg8": .string("after"),
        ])
        #expect(signal.unrepresented == ["arg5 (unix fd)"])
        #expect(recorder.events().first { $0.dbusSignal?.member == "Containers" }?["unrepresented"] == "arg5 (unix fd)")
    }

    @Test func boundsAreKeptAndWhatPassesThemIsNamed() async throws {
        let daemon = try DBusPrivateDaemon()
        let emitter = try DBusTestEmitter(address: daemon.address)
        let recorder = try await listening(DBusWatch(bus: .address(daemon.address), match: Self.test), on: daemon, emitter: emitter)
        try emitter.emit(member: "Long") { (writer) throws(SDBusError) in
            try writer.container("a", "u") { () throws(SDBusError) in for number in 0..<300 { try writer.uint32(UInt32(number)) } }
            try writer.bytes([UInt8](repeating: 7, count: 5000))
        }
        // Ten arrays deep: the ninth level is past the bound.
        try emitter.emit(member: "Deep") { (writer) throws(SDBusError) in
            func nest(_ level: Int) throws(SDBusError) {
                if level == 10 { return try writer.int32(1) }
                try writer.container("a", String(repeating: "a", count: 9 - level) + "i") { () throws(SDBusError) in try nest(level + 1) }
            }
            try nest(0)
        }
        // 5 × 256 fields: past the 1024 of one signal.
        try emitter.emit(member: "Wide") { (writer) throws(SDBusError) in
            for _ in 0..<5 {
                try writer.container("a", "i") { () throws(SDBusError) in for number in 0..<255 { try writer.int32(Int32(number)) } }
            }
        }
        #expect(await eventually { recorder.signals().filter { ["Long", "Deep", "Wide"].contains($0.member) }.count == 3 })
        let long = try #require(recorder.signals().first { $0.member == "Long" })
        #expect(long.arguments["arg0.count"] == .int(300) && long.arguments["arg0.255"] == .int(255) && long.arguments["arg0.256"] == nil)
        #expect(long.arguments["arg1.count"] == .int(5000) && long.arguments["arg1"]?.stringValue?.count == 8192)
        #expect(long.unrepresented == ["arg0.256… (44 more elements past 256)", "arg1 bytes 4096… (904 more bytes past 4096)"])
        let deep = try #require(recorder.signals().first { $0.member == "Deep" })
        let eightDeep = "arg0" + String(repeating: ".0", count: 8)
        #expect(deep.unrepresented == ["\(eightDeep) (nested deeper than 8)"], "\(deep.unrepresented)")
        #expect(deep.arguments[eightDeep.dropLast(2) + ".count"] == .int(1))
        let wide = try #require(recorder.signals().first { $0.member == "Wide" })
        #expect(wide.arguments.count == 1024)
        #expect(wide.unrepresented == ["arg4.0… (past 1024 fields)"], "\(wide.unrepresented)")
    }

    /// argN keys with values that need quoting — apostrophes, commas, backslashes, a quoted
    /// rule's own text — reach the bus as dbus-daemon reads them: only the equal string passes,
    /// not an object path of the same text, not a near miss.
    @Test func argumentMatchesTakeOnlyTheEqualStringHoweverHostile() async throws {
        let daemon = try DBusPrivateDaemon()
        let emitter = try DBusTestEmitter(address: daemon.address)
        let hostile = ["it's", "a,b", "back\\slash", "'\\''", "x',member='Other", "quote\"d \\' both,"]
        let recorder = DBusRecorder()
        for value in hostile {
            try recorder.follow(DBusWatch(bus: .address(daemon.address), match: DBusMatch(interface: "org.eventbus.Test", arguments: [0: value])))
        }
        for (index, value) in hostile.enumerated() {
            let listening = try await recorder.waitUntilListening(index, arrived: { $0.dbusSignal?.arguments["arg0"] == .string(value) }) {
                try emitter.emit(member: "Probe") { (writer) throws(SDBusError) in try writer.string(value) }
            }
            #expect(listening, "the watch for arg0=\(value) got its own value")
        }
        let before = hostile.indices.map { recorder.signals($0).count }
        for value in hostile {
            try emitter.emit(member: "Value") { (writer) throws(SDBusError) in try writer.string(value) }
            try emitter.emit(member: "NearMiss") { (writer) throws(SDBusError) in try writer.string(value + " ") }
        }
        try emitter.emit(member: "End") { (writer) throws(SDBusError) in try writer.string(hostile[0]) }
        #expect(await eventually { recorder.signals(0).contains { $0.member == "End" } })
        for (index, value) in hostile.enumerated() {
            let after = recorder.signals(index).dropFirst(before[index]).filter { $0.member != "Probe" && $0.member != "End" }
            #expect(after.map(\.member) == ["Value"] && after.first?.arguments["arg0"] == .string(value),
                    "arg0=\(value) (rule \(DBusMatch(arguments: [0: value]).rule)): \(after.map { "\($0.member) \($0.arguments)" })")
        }
    }

    /// `argN` takes strings only, as dbus-daemon matches: an object path of the same text is not one.
    @Test func argumentMatchesAreOnStringsOnly() async throws {
        let daemon = try DBusPrivateDaemon()
        let emitter = try DBusTestEmitter(address: daemon.address)
        let recorder = try await listening(DBusWatch(bus: .address(daemon.address), match: DBusMatch(interface: "org.eventbus.Test", arguments: [0: "/org/eventbus/x"])),
                                           on: daemon, emitter: emitter, probe: { (writer) throws(SDBusError) in try writer.string("/org/eventbus/x") })
        try emitter.emit(member: "AsPath") { (writer) throws(SDBusError) in try writer.objectPath("/org/eventbus/x") }
        try emitter.emit(member: "AsString") { (writer) throws(SDBusError) in try writer.string("/org/eventbus/x") }
        #expect(await eventually { recorder.signals().contains { $0.member == "AsString" } })
        #expect(!recorder.signals().contains { $0.member == "AsPath" })
    }

    @Test func aBurstArrivesExactlyOnceInOrder() async throws {
        let daemon = try DBusPrivateDaemon()
        let emitter = try DBusTestEmitter(address: daemon.address)
        let recorder = try await listening(DBusWatch(bus: .address(daemon.address), match: Self.test), on: daemon, emitter: emitter)
        for number in 0..<1000 {
            try emitter.emit(member: "Burst") { (writer) throws(SDBusError) in try writer.uint32(UInt32(number)) }
        }
        #expect(await eventually { recorder.signals().filter { $0.member == "Burst" }.count >= 1000 })
        try await Task.sleep(for: .milliseconds(200))
        let numbers = recorder.signals().filter { $0.member == "Burst" }.compactMap { $0.arguments["arg0"]?.intValue }
        #expect(numbers == (0..<1000).map(Int64.init))
        let sequences = recorder.events().map(\.sequence)
        #expect(sequences == sequences.sorted())
    }

    /// Two watches of one bus: one connection; each gets what its match takes, once — a signal
    /// both take reaches both, once each — and a third's events keep their place among the
    /// second's (the bus numbers them in the order the signals came).
    @Test func twoWatchesShareOneConnection() async throws {
        let daemon = try DBusPrivateDaemon()
        let emitter = try DBusTestEmitter(address: daemon.address)
        let bus = DBusBus.address(daemon.address)
        let recorder = DBusRecorder()
        let all = DBusWatch(bus: bus, match: Self.test)
        let one = DBusWatch(bus: bus, match: DBusMatch(interface: "org.eventbus.Test", member: "One"))
        let two = DBusWatch(bus: bus, match: DBusMatch(interface: "org.eventbus.Test", member: "Two"))
        try recorder.follow(all)
        try recorder.follow(one)
        try recorder.follow(two)
        #expect(try await recorder.waitUntilListening(0) { try emitter.emit(member: "Probe") })
        #expect(try await recorder.waitUntilListening(1, arrived: { $0.dbusSignal?.arguments["arg0"] == "probe" }) {
            try emitter.emit(member: "One") { (writer) throws(SDBusError) in try writer.string("probe") }
        })
        #expect(try await recorder.waitUntilListening(2, arrived: { $0.dbusSignal?.arguments["arg0"] == "probe" }) {
            try emitter.emit(member: "Two") { (writer) throws(SDBusError) in try writer.string("probe") }
        })
        #expect(recorder.driver.openConnections == 1)
        try await Task.sleep(for: .milliseconds(200))  // probes still on their way arrive before the counts
        let skip = (recorder.events(0).count, recorder.events(1).count, recorder.events(2).count)
        for number in 0..<20 {
            try emitter.emit(member: number % 2 == 0 ? "One" : "Two") { (writer) throws(SDBusError) in try writer.int32(Int32(number)) }
        }
        #expect(await eventually { recorder.signals(0).dropFirst(skip.0).count >= 20 })
        try await Task.sleep(for: .milliseconds(200))
        let everything = recorder.signals(0).dropFirst(skip.0).compactMap { $0.arguments["arg0"]?.intValue }
        let ones = recorder.signals(1).dropFirst(skip.1).compactMap { $0.arguments["arg0"]?.intValue }
        #expect(everything == (0..<20).map(Int64.init))
        #expect(ones == stride(from: 0, to: 20, by: 2).map(Int64.init))
        let merged = (recorder.events(1).dropFirst(skip.1) + recorder.events(2).dropFirst(skip.2)).sorted { $0.sequence < $1.sequence }
        #expect(merged.compactMap { $0.dbusSignal?.arguments["arg0"]?.intValue } == (0..<20).map(Int64.init))
        #expect(recorder.state(of: all) == "following bus at \(daemon.address)" && recorder.state(of: one) == recorder.state(of: all))
        recorder.cancel()
        #expect(await eventually { recorder.driver.openConnections == 0 })
    }

    /// `sender` with a well-known name takes its owner's signals only — not the same signal
    /// from anybody else — and follows the name when it changes hands.
    @Test func aWellKnownSenderMeansItsOwner() async throws {
        let daemon = try DBusPrivateDaemon()
        let owner = try DBusTestEmitter(address: daemon.address, owning: ["org.eventbus.Owner"])
        let other = try DBusTestEmitter(address: daemon.address)
        let recorder = DBusRecorder()
        try recorder.follow(DBusWatch(bus: .address(daemon.address), match: DBusMatch(sender: "org.eventbus.Owner", interface: "org.eventbus.Test")))
        try recorder.follow(DBusWatch(bus: .address(daemon.address), match: Self.test))
        #expect(try await recorder.waitUntilListening(0) { try owner.emit(member: "Probe") })
        #expect(try await recorder.waitUntilListening(1) { try other.emit(member: "Probe") })
        let skip = (recorder.events(0).count, recorder.events(1).count)
        // The bus orders what one client sends, not what two send: each signal is seen by the
        // watch of everything before the next is sent.
        func send(_ emitter: DBusTestEmitter, _ member: String) async throws {
            try emitter.emit(member: member)
            #expect(await eventually { recorder.signals(1).contains { $0.member == member } }, "\(member) arrives")
        }
        try await send(owner, "FromOwner")
        try await send(other, "FromOther")
        // The name changes hands: the new owner's signals are the watch's, the old one's not.
        let successor = try DBusTestEmitter(address: daemon.address)
        try owner.release("org.eventbus.Owner")
        try successor.own("org.eventbus.Owner")
        try await send(owner, "FromFormerOwner")
        try await send(successor, "FromSuccessor")
        try await send(other, "End")
        #expect(await eventually { recorder.signals(1).contains { $0.member == "End" } })
        try await Task.sleep(for: .milliseconds(200))
        // Probes still on their way when the waits ended are left out.
        #expect(recorder.signals(0).dropFirst(skip.0).map(\.member).filter { $0 != "Probe" } == ["FromOwner", "FromSuccessor"])
        #expect(recorder.signals(1).dropFirst(skip.1).map(\.member).filter { $0 != "Probe" }
                == ["FromOwner", "FromOther", "FromFormerOwner", "FromSuccessor", "End"])
        #expect(recorder.signals(0).last?.sender == successor.uniqueName)
    }

    /// The presets on a bus where the test owns logind's and NetworkManager's names.
    @Test func presetsPostTheirOwnEvents() async throws {
        let daemon = try DBusPrivateDaemon()
        let logind = try DBusTestEmitter(address: daemon.address, owning: ["org.freedesktop.login1"])
        let networkManager = try DBusTestEmitter(address: daemon.address, owning: ["org.freedesktop.NetworkManager"])
        let impostor = try DBusTestEmitter(address: daemon.address)
        let bus = DBusBus.address(daemon.address)
        let recorder = DBusRecorder()
        for preset in [DBusPreset.sleep, .sessions, .sessionLock, .network] { try recorder.follow(DBusWatch(preset: preset, bus: bus)) }
        let manager = (path: "/org/freedesktop/login1", interface: "org.freedesktop.login1.Manager")
        // Each preset's first event doubles as its probe; the test repeats none after.
        #expect(try await recorder.waitUntilListening(0, arrived: { $0.name == "system.sleep" }) {
            try logind.emit(path: manager.path, interface: manager.interface, member: "PrepareForSleep") { (writer) throws(SDBusError) in try writer.bool(true) }
        })
        #expect(try await recorder.waitUntilListening(1, arrived: { $0.name == "session.new" }) {
            try logind.emit(path: manager.path, interface: manager.interface, member: "SessionNew") { (writer) throws(SDBusError) in
                try writer.string("2")
                try writer.objectPath("/org/freedesktop/login1/session/_32")
            }
        })
        #expect(try await recorder.waitUntilListening(2, arrived: { $0.name == "session.lock" }) {
            try logind.emit(path: "/org/freedesktop/login1/session/_32", interface: "org.freedesktop.login1.Session", member: "Lock")
        })
        #expect(try await recorder.waitUntilListening(3, arrived: { $0.name == "network.connectivity" }) {
            try networkManager.emit(path: "/org/freedesktop/NetworkManager", interface: "org.freedesktop.NetworkManager", member: "StateChanged") {
                (writer) throws(SDBusError) in try writer.uint32(70)
            }
        })
        try await Task.sleep(for: .milliseconds(300))  // probes still on their way arrive before the count
        let skip = (0..<4).map { recorder.events($0).count }
        try impostor.emit(path: manager.path, interface: manager.interface, member: "PrepareForSleep") { (writer) throws(SDBusError) in try writer.bool(true) }
        try logind.emit(path: manager.path, interface: manager.interface, member: "PrepareForSleep") { (writer) throws(SDBusError) in try writer.bool(false) }
        try logind.emit(path: manager.path, interface: manager.interface, member: "UserNew") { (writer) throws(SDBusError) in
            try writer.uint32(1000)
            try writer.objectPath("/org/freedesktop/login1/user/_31000")
        }
        try logind.emit(path: manager.path, interface: manager.interface, member: "SessionRemoved") { (writer) throws(SDBusError) in
            try writer.string("c1")
            try writer.objectPath("/org/freedesktop/login1/session/c1")
        }
        try logind.emit(path: "/org/freedesktop/login1/session/c1", interface: "org.freedesktop.login1.Session", member: "Unlock")
        try networkManager.emit(path: "/org/freedesktop/NetworkManager", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged") {
            (writer) throws(SDBusError) in
            try writer.string("org.freedesktop.NetworkManager")
            try writer.changedProperties([("Connectivity", .uint32(3)), ("State", .uint32(70))])
            try writer.strings([])
        }
        #expect(await eventually { (0..<4).allSatisfy { recorder.events($0).count > skip[$0] } })
        try await Task.sleep(for: .milliseconds(200))
        func new(_ index: Int) -> [String] {
            recorder.events(index).dropFirst(skip[index]).map { event in
                ([event.name] + event.fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }).joined(separator: " ")
            }
        }
        #expect(new(0) == ["system.resume"])
        #expect(new(1) == ["session.removed id=c1 path=/org/freedesktop/login1/session/c1"])
        #expect(new(2) == ["session.unlock id=c1 path=/org/freedesktop/login1/session/c1"])
        #expect(new(3) == ["network.connectivity code=3 kind=connectivity state=limited"])
        let first = recorder.events(1).first { $0.name == "session.new" }
        #expect(first?["id"] == "2" && first?["path"] == "/org/freedesktop/login1/session/_32")
        #expect(recorder.events(2).first { $0.name == "session.lock" }?["id"] == "2")
        #expect(recorder.events(3).first?["state"] == "connected_global")
    }

    /// A rule the bus will not add (its limit of rules per connection is reached): that
    /// watch's status says so, with the bus's answer; the others follow.
    @Test func aRuleTheBusRefusesIsTheWatchsStatus() async throws {
        let daemon = try DBusPrivateDaemon(matchRuleLimit: 2)
        let emitter = try DBusTestEmitter(address: daemon.address)
        let recorder = DBusRecorder()
        let watches = ["One", "Two", "Three"].map { DBusWatch(bus: .address(daemon.address), match: DBusMatch(interface: "org.eventbus.Test", member: $0)) }
        for watch in watches.prefix(2) { try recorder.follow(watch) }
        #expect(try await recorder.waitUntilListening(1, arrived: { $0.dbusSignal?.member == "Two" }) { try emitter.emit(member: "Two") })
        try recorder.follow(watches[2])
        let refused = "unavailable: the match rule \(watches[2].match.rule) was not added: org.freedesktop.DBus.Error.LimitsExceeded"
        #expect(await eventually { recorder.state(of: watches[2])?.hasPrefix(refused) == true }, "\(recorder.state(of: watches[2]) ?? "no state")")
        #expect(recorder.state(of: watches[0]) == "following bus at \(daemon.address)")
    }

    /// The bus dies (SIGKILL) and comes back at the same address: the status says so meanwhile;
    /// then a `dbus.gap` with how long, before any signal of the new connection, and signals again.
    @Test func aBusThatDiesAndComesBackIsAGap() async throws {
        let daemon = try DBusPrivateDaemon()
        var emitter = try DBusTestEmitter(address: daemon.address)
        let watch = DBusWatch(bus: .address(daemon.address), match: Self.test)
        let recorder = try await listening(watch, on: daemon, emitter: emitter)
        try emitter.emit(member: "Before")
        #expect(await eventually { recorder.signals().contains { $0.member == "Before" } })
        daemon.kill()
        #expect(await eventually { recorder.state(of: watch)?.hasPrefix("unavailable: ") == true },
                "\(recorder.state(of: watch) ?? "no state")")
        try await Task.sleep(for: .milliseconds(300))
        #expect(recorder.state(of: watch)?.contains("unavailable") == true, "still away: \(recorder.state(of: watch) ?? "")")
        try daemon.start()
        emitter = try DBusTestEmitter(address: daemon.address)
        let back = try await recorder.waitUntilListening(arrived: { $0.dbusSignal?.member == "After" }) { try emitter.emit(member: "After") }
        #expect(back)
        let names = recorder.events().map { $0.dbusSignal?.member ?? $0.name }.filter { $0 != "Probe" }
        let gap = try #require(recorder.events().compactMap(\.dbusGap).first)
        #expect(names.first == "Before" && names.dropFirst().first == "dbus.gap" && names.dropFirst(2).allSatisfy { $0 == "After" }, "\(names)")
        #expect(gap.bus == "address:\(daemon.address)" && gap.reason.contains("closed") && gap.downSeconds >= 0.3, "\(gap)")
        #expect(recorder.events().compactMap(\.dbusGap).count == 1)
        #expect(recorder.state(of: watch) == "following bus at \(daemon.address)")
    }

    /// A bus that is not there: unavailable with the reason; when it appears, the watch
    /// follows it — after a gap for the time it could not see.
    @Test func aBusThatIsNotThereYetIsUnavailableUntilItIs() async throws {
        let daemon = try DBusPrivateDaemon(started: false)
        let watch = DBusWatch(bus: .address(daemon.address), match: Self.test)
        let recorder = DBusRecorder()
        try recorder.follow(watch)
        #expect(await eventually { recorder.state(of: watch)?.hasPrefix("unavailable: cannot connect to \(daemon.address): No such file or directory") == true },
                "\(recorder.state(of: watch) ?? "no state")")
        try daemon.start()
        let emitter = try DBusTestEmitter(address: daemon.address)
        #expect(try await recorder.waitUntilListening { try emitter.emit(member: "Probe") })
        let gap = try #require(recorder.events().first?.dbusGap)
        #expect(gap.reason.contains("No such file or directory"))
        #expect(recorder.state(of: watch) == "following bus at \(daemon.address)")
    }

    /// A socket that accepts connections and closes them — a bus daemon on its way out — is not a
    /// bus coming back: sd-bus answers the watch's pending calls itself as the connection fails,
    /// and those made-up replies must not end the outage (they posted a gap per attempt). When
    /// the real bus comes, the watch gets one gap for the whole time.
    @Test func aSocketThatAcceptsAndClosesIsNoBusComingBack() async throws {
        let daemon = try DBusPrivateDaemon(started: false)
        let dying = try ClosingListener(path: daemon.socketPath)
        let watch = DBusWatch(bus: .address(daemon.address), match: Self.test)
        let recorder = DBusRecorder()
        try recorder.follow(watch)
        #expect(await eventually { dying.accepted >= 4 }, "\(recorder.state(of: watch) ?? "no state")")
        #expect(recorder.events().isEmpty, "\(recorder.events().map(\.name))")
        #expect(recorder.state(of: watch)?.hasPrefix("unavailable: ") == true, "\(recorder.state(of: watch) ?? "no state")")
        dying.stop()
        try daemon.start()
        let emitter = try DBusTestEmitter(address: daemon.address)
        #expect(try await recorder.waitUntilListening { try emitter.emit(member: "Probe") })
        #expect(recorder.events().compactMap(\.dbusGap).count == 1, "\(recorder.events().map(\.name))")
        #expect(recorder.events().first?.dbusGap != nil)
    }
}

/// A Unix socket at `path` that accepts every connection and closes it at once, on a thread of
/// its own, counting them; ``stop()`` closes it and removes the file.
private final class ClosingListener: @unchecked Sendable {
    private let fd: Int32
    private let path: String
    private let count = Collected(0)
    private let running = Collected(true)

    init(path: String) throws {
        self.path = path
        fd = try System.StreamSocket.listen(at: path)
        Thread.detachNewThread { [fd, count, running] in
            while running.value {
                if let client = try? System.StreamSocket.accept(fd, "closing listener") {
                    System.StreamSocket.close(client)
                    count.update { $0 += 1 }
                } else {
                    usleep(5_000)
                }
            }
        }
    }

    var accepted: Int { count.value }

    func stop() {
        running.update { $0 = false }
        usleep(20_000)  // the thread's last look
        System.StreamSocket.close(fd)
        System.StreamSocket.unlink(path)
    }
}
