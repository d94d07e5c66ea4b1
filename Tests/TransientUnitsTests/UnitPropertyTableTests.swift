import RuleActions
import SystemdBus
import Testing
@testable import TransientUnits

/// The table that turns a rule's unit properties into the typed values systemd takes over
/// D-Bus, and ``TransientUnitLauncher/check(_:)``, without systemd. (The same properties
/// against a real systemd: ProductionTests' TransientUnits.)
struct UnitPropertyTableTests {
    private func converted(_ name: String, _ value: String) -> (name: String, value: SDBusVariant)? {
        try? UnitPropertyTable.convert(UnitProperty(name: name, value: value)).get()
    }

    private func refused(_ name: String, _ value: String) -> String? {
        if case .failure(let problem) = UnitPropertyTable.convert(UnitProperty(name: name, value: value)) { problem.message } else { nil }
    }

    @Test func sizesAreBytesInBase1024() {
        #expect(converted("MemoryMax", "512M")?.value == .uint64(512 * 1024 * 1024))
        #expect(converted("MemoryMax", "1G")?.value == .uint64(1 << 30))
        #expect(converted("MemoryHigh", "1.5K")?.value == .uint64(1536))
        #expect(converted("MemoryMax", "4096")?.value == .uint64(4096))
        #expect(converted("MemorySwapMax", "infinity")?.value == .uint64(.max))
        #expect(converted("MemoryMax", " 2T ")?.value == .uint64(2 << 40))
        for bad in ["banana", "", "12Q", "1.2.3M", "-5M", ".5G", "512MiB", "50%"] {
            #expect(refused("MemoryMax", bad)?.hasPrefix("MemoryMax: '") == true, "\(bad)")
        }
    }

    @Test func countsWeightsAndNice() {
        #expect(converted("TasksMax", "64")?.value == .uint64(64))
        #expect(converted("TasksMax", "infinity")?.value == .uint64(.max))
        #expect(refused("TasksMax", "lots") != nil)
        #expect(converted("IOWeight", "100")?.value == .uint64(100))
        #expect(converted("CPUWeight", "10000")?.value == .uint64(10000))
        #expect(refused("IOWeight", "0") != nil && refused("IOWeight", "10001") != nil)
        #expect(converted("Nice", "-5")?.value == .int32(-5))
        #expect(converted("Nice", "19")?.value == .int32(19))
        #expect(refused("Nice", "20") != nil && refused("Nice", "-21") != nil && refused("Nice", "high") != nil)
    }

    /// systemd takes a CPU quota over D-Bus as µs of CPU time per second, under another name.
    @Test func cpuQuotaIsMicrosecondsPerSecond() {
        let quota = converted("CPUQuota", "50%")
        #expect(quota?.name == "CPUQuotaPerSecUSec" && quota?.value == .uint64(500_000))
        #expect(converted("CPUQuota", "200%")?.value == .uint64(2_000_000))
        #expect(converted("CPUQuota", "12.5%")?.value == .uint64(125_000))
        for bad in ["50", "0%", "-10%", "half%"] { #expect(refused("CPUQuota", bad) != nil, "\(bad)") }
    }

    @Test func booleansTakeSystemdsWords() {
        for yes in ["yes", "true", "on", "1", "Y", "TRUE"] { #expect(converted("NoNewPrivileges", yes)?.value == .bool(true), "\(yes)") }
        for no in ["no", "false", "off", "0", "n"] { #expect(converted("PrivateTmp", no)?.value == .bool(false), "\(no)") }
        #expect(converted("DynamicUser", "yes")?.value == .bool(true))
        #expect(converted("PrivateNetwork", "yes")?.value == .bool(true))
        #expect(refused("PrivateTmp", "maybe") == "PrivateTmp: 'maybe' is not a boolean (yes or no)")
    }

    @Test func choicesAreWordsAndABooleanIsItsYesOrNo() {
        #expect(converted("ProtectSystem", "strict")?.value == .string("strict"))
        #expect(converted("ProtectSystem", "true")?.value == .string("yes"))
        #expect(converted("ProtectHome", "read-only")?.value == .string("read-only"))
        #expect(converted("ProtectHome", "off")?.value == .string("no"))
        #expect(refused("ProtectSystem", "very") == "ProtectSystem: 'very' is not one of no, yes, full, strict")
    }

    @Test func pathListsAreAbsoluteWithTheirPrefixes() {
        #expect(converted("ReadWritePaths", "/var/lib/app -/srv/maybe +/run/x")?.value == .strings(["/var/lib/app", "-/srv/maybe", "+/run/x"]))
        #expect(refused("ReadWritePaths", "/ok relative/path") == "ReadWritePaths: 'relative/path' is not an absolute path")
        #expect(converted("SupplementaryGroups", "adm systemd-journal")?.value == .strings(["adm", "systemd-journal"]))
        #expect(converted("UMask", "0027")?.value == .uint32(0o027))
        #expect(refused("UMask", "0999") != nil)
    }

    /// What the launcher sets from the command's own fields cannot be set again as a property,
    /// and an unknown name is refused with the list of the known ones.
    @Test func reservedAndUnknownNamesAreRefused() {
        #expect(refused("User", "root") == "User: set by `user:`, not as a unit property")
        #expect(refused("ExecStart", "/bin/true") == "ExecStart: set by the rule's command, not as a unit property")
        #expect(refused("RuntimeMaxSec", "5") == "RuntimeMaxSec: set by `timeout:`, not as a unit property")
        let unknown = refused("MemoryLimit", "1G")
        #expect(unknown?.hasPrefix("MemoryLimit: not a unit property a rule may set (it may set ") == true)
        #expect(unknown?.contains("MemoryMax") == true && unknown?.contains("ProtectSystem") == true)
    }

    /// The loader's check: one problem per property that does not convert, in order, each
    /// naming its property; none for a good list.
    @Test func checkGivesOneProblemPerBadProperty() {
        let good = [UnitProperty(name: "MemoryMax", value: "512M"), UnitProperty(name: "ProtectSystem", value: "strict"),
                    UnitProperty(name: "CPUQuota", value: "20%"), UnitProperty(name: "TasksMax", value: "32"),
                    UnitProperty(name: "Nice", value: "5"), UnitProperty(name: "NoNewPrivileges", value: "yes"),
                    UnitProperty(name: "ProtectHome", value: "yes"), UnitProperty(name: "PrivateTmp", value: "yes"),
                    UnitProperty(name: "PrivateNetwork", value: "yes"), UnitProperty(name: "ReadWritePaths", value: "/var/lib/x"),
                    UnitProperty(name: "DynamicUser", value: "yes"), UnitProperty(name: "IOWeight", value: "50")]
        #expect(TransientUnitLauncher.check(good).isEmpty)
        let problems = TransientUnitLauncher.check([UnitProperty(name: "MemoryMax", value: "banana"), good[1],
                                                    UnitProperty(name: "Frobnicate", value: "yes"), UnitProperty(name: "Nice", value: "99")])
        #expect(problems.count == 3)
        #expect(problems[0] == "MemoryMax: 'banana' is not a size (bytes, with K, M, G, T, P or E, or infinity)")
        #expect(problems[1].hasPrefix("Frobnicate: "))
        #expect(problems[2] == "Nice: '99' is not a nice level from -20 to 19")
    }
}
