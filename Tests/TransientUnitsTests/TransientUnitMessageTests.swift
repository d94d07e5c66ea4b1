import CSystemd
import Glibc
import RuleActions
@testable import SystemdBus
import Testing
@testable import TransientUnits

/// The unit a command becomes: its properties, and the `StartTransientUnit` body sd-bus builds
/// from them, read back with sd-bus's own reader — without systemd (the bus is one end of a
/// socketpair, opened but never authenticated: enough for sd-bus to make and seal messages).
struct TransientUnitMessageTests {
    private let spec = CommandSpec(argv: ["/usr/bin/printf", "%s\\n", "two words", "$HOME costs $5"], environment: ["EVENTBUS_EVENT": "user.x", "A": "1"],
                                   standardInput: Array(#"{"name":"user.x"}"#.utf8), user: nil, group: "adm",
                                   timeout: .milliseconds(1500), stopGrace: .seconds(3),
                                   unitProperties: [UnitProperty(name: "MemoryMax", value: "64M"), UnitProperty(name: "CPUQuota", value: "50%")],
                                   unitName: "eventbus-rule-x-1.service")

    @Test func theLaunchersPropertiesComeFirstThenTheRules() throws {
        let properties = try TransientUnitLauncher.unitProperties(for: spec, defaultUser: "nobody").get()
        let byName = Dictionary(properties.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
        #expect(byName["Type"] == .string("exec"))
        // `$` doubled: systemd would expand `$HOME` itself.
        #expect(byName["ExecStart"] == .commands([SDBusExecCommand(path: "/usr/bin/printf",
                                                                   arguments: ["/usr/bin/printf", "%s\\n", "two words", "$$HOME costs $$5"])]))
        #expect(byName["User"] == .string("nobody"), "no user: the launcher's default, never root")
        #expect(byName["Group"] == .string("adm"))
        #expect(byName["WorkingDirectory"] == .string("/"))
        #expect(byName["Environment"] == .strings(["A=1", "EVENTBUS_EVENT=user.x"]))
        #expect(byName["StandardInput"] == .string("data"))
        #expect(byName["StandardInputData"] == .bytes(Array(#"{"name":"user.x"}"#.utf8)))
        #expect(byName["StandardOutput"] == .string("journal") && byName["StandardError"] == .string("journal"))
        #expect(byName["RuntimeMaxUSec"] == .uint64(1_500_000))
        #expect(byName["TimeoutStopUSec"] == .uint64(3_000_000))
        #expect(byName["CollectMode"] == .string("inactive-or-failed"))
        #expect(byName["MemoryMax"] == .uint64(64 << 20) && byName["CPUQuotaPerSecUSec"] == .uint64(500_000))
        #expect(properties.suffix(2).map(\.name) == ["MemoryMax", "CPUQuotaPerSecUSec"])
    }

    /// DynamicUser=yes without `user:` gets no User=: the default user would be a real one.
    @Test func aDynamicUserIsNotTheDefaultUser() throws {
        var dynamic = spec
        dynamic.unitProperties = [UnitProperty(name: "DynamicUser", value: "yes")]
        let properties = try TransientUnitLauncher.unitProperties(for: dynamic, defaultUser: "nobody").get()
        #expect(!properties.contains { $0.name == "User" } && properties.contains { $0.name == "DynamicUser" && $0.value == .bool(true) })
        dynamic.user = "backup"
        let named = try TransientUnitLauncher.unitProperties(for: dynamic, defaultUser: "nobody").get()
        #expect(named.contains { $0.name == "User" && $0.value == .string("backup") })
    }

    @Test func aRelativeProgramOrABadPropertyIsRefusedBeforeSystemdIsAsked() {
        var relative = spec
        relative.argv = ["printf", "x"]
        guard case .failure(let refused) = TransientUnitLauncher.unitProperties(for: relative, defaultUser: "nobody") else {
            Issue.record("a relative program was accepted")
            return
        }
        #expect(refused.message == "the command must start with an absolute path, not 'printf'")
        var bad = spec
        bad.unitProperties = [UnitProperty(name: "MemoryMax", value: "banana")]
        guard case .failure(let problems) = TransientUnitLauncher.unitProperties(for: bad, defaultUser: "nobody") else {
            Issue.record("a bad property was accepted")
            return
        }
        #expect(problems.message.hasPrefix("MemoryMax: 'banana'"))
    }

    /// Every D-Bus type the unit needs, appended and read back in the exact signature systemd's
    /// `StartTransientUnit(in s name, in s mode, in a(sv) properties, in a(sa(sv)) aux)` takes.
    @Test func theStartBodyHasSystemdsSignature() throws {
        var sockets: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &sockets) == 0)
        defer { close(sockets[1]) }
        var bus: OpaquePointer?
        #expect(sd_bus_new(&bus) >= 0)
        defer { sd_bus_close_unref(bus) }  // no flush: nobody will ever read the other end
        #expect(sd_bus_set_fd(bus, sockets[0], sockets[0]) >= 0)
        #expect(sd_bus_start(bus) >= 0)
        var message: OpaquePointer?
        #expect(sd_bus_message_new_method_call(bus, &message, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                               "org.freedesktop.systemd1.Manager", "StartTransientUnit") >= 0)
        defer { sd_bus_message_unref(message) }
        let properties = try TransientUnitLauncher.unitProperties(for: spec, defaultUser: "nobody").get()
        let writer = SDBusMessageWriter(message: message!, member: "StartTransientUnit")
        try writer.string(spec.unitName)
        try writer.string("fail")
        try writer.properties(properties + [("Nice", .int32(-3)), ("UMask", .uint32(0o22)), ("PrivateTmp", .bool(true))])
        try writer.container("a", "(sa(sv))") { () throws(SDBusError) in }
        #expect(sd_bus_message_seal(message, 1, 0) >= 0)
        #expect(String(cString: sd_bus_message_get_signature(message, 1)) == "ssa(sv)a(sa(sv))")
        #expect(sd_bus_message_rewind(message, 1) >= 0)

        let reader = SDBusMessageReader(message!)
        #expect(reader.string() == spec.unitName && reader.string() == "fail")
        #expect(reader.enter("a", "(sv)"))
        var read: [String: PropertyValue] = [:]
        var signatures: [String: String] = [:]
        while reader.enter("r", "sv") {
            let name = try #require(reader.string())
            var type: CChar = 0
            var contents: UnsafePointer<CChar>?
            #expect(sd_bus_message_peek_type(message, &type, &contents) > 0)
            signatures[name] = contents.map { String(cString: $0) }
            if name == "ExecStart" {
                // a(sasb): path, argv, ignore-failure.
                #expect(reader.enter("v", "a(sasb)") && reader.enter("a", "(sasb)") && reader.enter("r", "sasb"))
                #expect(reader.string() == "/usr/bin/printf")
                #expect(reader.enter("a", "s"))
                var argv: [String] = []
                while let argument = reader.string() { argv.append(argument) }
                reader.exit()
                #expect(argv == ["/usr/bin/printf", "%s\\n", "two words", "$$HOME costs $$5"])
                #expect(reader.bool() == false)
                reader.exit(); reader.exit(); reader.exit()
            } else if let value = try #require(reader.variant()) {
                read[name] = value
            }
            reader.exit()
        }
        reader.exit()
        #expect(signatures["ExecStart"] == "a(sasb)" && signatures["Environment"] == "as" && signatures["StandardInputData"] == "ay")
        #expect(signatures["MemoryMax"] == "t" && signatures["Nice"] == "i" && signatures["UMask"] == "u" && signatures["PrivateTmp"] == "b")
        #expect(read["User"] == .string("nobody") && read["RuntimeMaxUSec"] == .unsigned(1_500_000))
        #expect(read["StandardInputData"] == .bytes(Array(#"{"name":"user.x"}"#.utf8)))
        #expect(read["Nice"] == .int(-3) && read["PrivateTmp"] == .bool(true) && read["MemoryMax"] == .unsigned(64 << 20))
        #expect(reader.enter("a", "(sa(sv))"))
        #expect(!reader.enter("r", "sa(sv)"))
    }
}
