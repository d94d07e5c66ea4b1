import Foundation
import RuleActions
import SystemdBus

/// How a rule's unit properties (`MemoryMax: 512M`, written as in a unit file) become the typed
/// values `StartTransientUnit` takes over D-Bus. systemd parses unit files itself but takes
/// D-Bus properties as typed values only, so every property a rule may set is in this table,
/// with its D-Bus name and type; anything else is refused when the rule is loaded, naming the
/// property, instead of failing at the first event. docs/transient-units.md lists the table.
enum UnitPropertyTable {
    /// The shapes of value the table knows.
    enum Kind: Equatable {
        /// `b`: yes/no, true/false, on/off, 1/0 (systemd's parse_boolean).
        case boolean
        /// `t` bytes: a number with an optional K, M, G, T, P or E suffix (base 1024), or `infinity`.
        case bytes
        /// `t`: a whole number, or `infinity`.
        case count
        /// `t`: 1…10000 (cgroup weights).
        case weight
        /// `i`: -20…19.
        case nice
        /// `t`: `NN%` of one CPU, sent as `CPUQuotaPerSecUSec` (µs of CPU per second).
        case cpuQuota
        /// `s`: one of these words; a boolean is its yes/no.
        case choice([String])
        /// `as`: absolute paths, separated by spaces, each may start with `-` (ignore if missing) or `+`.
        case paths
        /// `as`: names separated by spaces.
        case names
        /// `u`: an octal mode, 0000…0777.
        case umask
    }

    static let kinds: [String: Kind] = [
        // Resource control (systemd.resource-control(5)).
        "MemoryMax": .bytes, "MemoryHigh": .bytes, "MemoryLow": .bytes, "MemoryMin": .bytes, "MemorySwapMax": .bytes,
        "TasksMax": .count,
        "CPUQuota": .cpuQuota,
        "CPUWeight": .weight, "IOWeight": .weight,
        // Execution (systemd.exec(5)).
        "Nice": .nice,
        "UMask": .umask,
        "SupplementaryGroups": .names,
        "DynamicUser": .boolean,
        // Sandboxing (systemd.exec(5)).
        "NoNewPrivileges": .boolean, "PrivateTmp": .boolean, "PrivateNetwork": .boolean, "PrivateDevices": .boolean,
        "PrivateUsers": .boolean, "PrivateIPC": .boolean, "RemoveIPC": .boolean,
        "ProtectKernelTunables": .boolean, "ProtectKernelModules": .boolean, "ProtectKernelLogs": .boolean,
        "ProtectControlGroups": .boolean, "ProtectClock": .boolean, "ProtectHostname": .boolean,
        "RestrictRealtime": .boolean, "RestrictSUIDSGID": .boolean, "LockPersonality": .boolean,
        "MemoryDenyWriteExecute": .boolean,
        "ProtectSystem": .choice(["no", "yes", "full", "strict"]),
        "ProtectHome": .choice(["no", "yes", "read-only", "tmpfs"]),
        "ProtectProc": .choice(["default", "noaccess", "invisible", "ptraceable"]),
        "ProcSubset": .choice(["all", "pid"]),
        "ReadWritePaths": .paths, "ReadOnlyPaths": .paths, "InaccessiblePaths": .paths,
    ]

    /// Properties the launcher sets from the command's own fields: a rule sets them with its
    /// keys (`user:`, `timeout:`, …), never as unit properties, so the two cannot disagree.
    static let reserved: [String: String] = [
        "ExecStart": "the rule's command", "User": "`user:`", "Group": "`group:`",
        "WorkingDirectory": "`working_directory:`", "Environment": "`environment:`",
        "RuntimeMaxSec": "`timeout:`", "TimeoutStopSec": "the stop grace",
        "StandardInput": "the event on standard input", "StandardInputData": "the event on standard input",
        "StandardOutput": "the journal", "StandardError": "the journal",
        "Type": "the launcher (exec)", "CollectMode": "the launcher", "Description": "the launcher",
    ]

    /// `property` as a D-Bus name and value, or why it cannot be one (the message names it).
    static func convert(_ property: UnitProperty) -> Result<(name: String, value: SDBusVariant), UnitPropertyProblem> {
        let name = property.name
        let value = property.value.trimmingCharacters(in: .whitespaces)
        func problem(_ text: String) -> Result<(name: String, value: SDBusVariant), UnitPropertyProblem> {
            .failure(UnitPropertyProblem(property: name, message: "\(name): \(text)"))
        }
        if let setBy = reserved[name] {
            return problem("set by \(setBy), not as a unit property")
        }
        guard let kind = kinds[name] else {
            return problem("not a unit property a rule may set (it may set \(kinds.keys.sorted().joined(separator: ", ")))")
        }
        switch kind {
        case .boolean:
            guard let flag = boolean(value) else { return problem("'\(value)' is not a boolean (yes or no)") }
            return .success((name, .bool(flag)))
        case .bytes:
            guard let bytes = size(value) else {
                return problem("'\(value)' is not a size (bytes, with K, M, G, T, P or E, or infinity)")
            }
            return .success((name, .uint64(bytes)))
        case .count:
            guard let count = value == "infinity" ? UInt64.max : UInt64(value) else {
                return problem("'\(value)' is not a whole number or infinity")
            }
            return .success((name, .uint64(count)))
        case .weight:
            guard let weight = UInt64(value), (1...10000).contains(weight) else {
                return problem("'\(value)' is not a weight from 1 to 10000")
            }
            return .success((name, .uint64(weight)))
        case .nice:
            guard let nice = Int32(value), (-20...19).contains(nice) else {
                return problem("'\(value)' is not a nice level from -20 to 19")
            }
            return .success((name, .int32(nice)))
        case .cpuQuota:
            guard value.hasSuffix("%"), let percent = Double(value.dropLast()), percent > 0, percent.isFinite,
                  percent * 10_000 < Double(UInt64.max) else {
                return problem("'\(value)' is not a percentage of one CPU above 0 (50%, 200%)")
            }
            return .success(("CPUQuotaPerSecUSec", .uint64(UInt64((percent * 10_000).rounded()))))
        case .choice(let words):
            let word = boolean(value).map { $0 ? "yes" : "no" } ?? value
            guard words.contains(word) else { return problem("'\(value)' is not one of \(words.joined(separator: ", "))") }
            return .success((name, .string(word)))
        case .paths:
            let paths = value.split(separator: " ").map(String.init)
            if let bad = paths.first(where: { !$0.drop(while: { $0 == "-" || $0 == "+" }).hasPrefix("/") }) {
                return problem("'\(bad)' is not an absolute path")
            }
            return .success((name, .strings(paths)))
        case .names:
            return .success((name, .strings(value.split(separator: " ").map(String.init))))
        case .umask:
            guard let mode = UInt32(value, radix: 8), mode <= 0o777 else { return problem("'\(value)' is not an octal mode (0022)") }
            return .success((name, .uint32(mode)))
        }
    }

    /// systemd's parse_boolean.
    static func boolean(_ text: String) -> Bool? {
        switch text.lowercased() {
        case "1", "yes", "y", "true", "t", "on": true
        case "0", "no", "n", "false", "f", "off": false
        default: nil
        }
    }

    /// systemd's parse_size with base 1024: `512M`, `1.5G`, `100` (bytes), `infinity`.
    static func size(_ text: String) -> UInt64? {
        if text == "infinity" { return UInt64.max }
        let factors: [Character: Double] = ["B": 1, "K": 1024, "M": 1_048_576, "G": 1_073_741_824,
                                            "T": 1_099_511_627_776, "P": 1_125_899_906_842_624, "E": 1_152_921_504_606_846_976]
        var number = Substring(text)
        var factor: Double = 1
        if let last = number.last, let scale = factors[last] {
            factor = scale
            number = number.dropLast()
        }
        guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
              number.filter({ $0 == "." }).count <= 1, number.first != ".", number.last != "." else { return nil }
        if factor == 1 { return UInt64(number) }
        guard let value = Double(number) else { return nil }
        let bytes = (value * factor).rounded(.down)
        return bytes < Double(UInt64.max) ? UInt64(bytes) : nil
    }
}

/// A unit property a rule may not set, or set to a value that is not of its type.
struct UnitPropertyProblem: Error, Equatable {
    var property: String
    /// Names the property: `MemoryMax: 'banana' is not a size (…)`.
    var message: String
}
