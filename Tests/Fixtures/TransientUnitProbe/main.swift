// transient-unit-probe: runs one command through TransientUnitLauncher and prints, one JSON
// object a line, what became of it — for ProductionTests, which install it in the container and
// run it as root and as eventbus under the real systemd.
//
//   transient-unit-probe --unit NAME [--user U] [--group G] [--timeout SECONDS] [--tail LINES]
//       [--stdin TEXT] [--env NAME=VALUE]... [--property Name=Value]... [--start-when PATH]
//       [--cancel-when PATH] -- PROGRAM ARG...
//
// Lines: {"event":"unavailable","code":…,"message":…} when systemd cannot be used;
// {"event":"connected"} (with --start-when) once the launcher is made; {"event":"started","pid":…,"unit":…}; {"event":"outcome","termination":"exited|signalled|
// timedOut|stopped|failedToStart","status":…,"reason":…,"seconds":…,"tail":[…]}.
// --start-when: the launcher is made (connect) at once, the run starts once PATH exists.
// --cancel-when: the run is cancelled (as a rule's restart mode does) once PATH exists.
import Foundation
import RuleActions
import TransientUnits

func emit(_ object: [String: Any]) {
    let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}

var arguments = Array(CommandLine.arguments.dropFirst())
var spec = CommandSpec(argv: [], unitName: "")
var cancelWhen: String?
var startWhen: String?
while let option = arguments.first, option != "--" {
    arguments.removeFirst()
    guard let value = arguments.first else { FileHandle.standardError.write(Data("\(option) needs a value\n".utf8)); exit(64) }
    arguments.removeFirst()
    switch option {
    case "--unit": spec.unitName = value
    case "--user": spec.user = value
    case "--group": spec.group = value
    case "--timeout": spec.timeout = .milliseconds(Int((Double(value) ?? 0) * 1000))
    case "--tail": spec.outputTailLines = Int(value) ?? 10
    case "--stdin": spec.standardInput = Array(value.utf8)
    case "--env":
        let parts = value.split(separator: "=", maxSplits: 1).map(String.init)
        spec.environment[parts[0]] = parts.count > 1 ? parts[1] : ""
    case "--property":
        let parts = value.split(separator: "=", maxSplits: 1).map(String.init)
        spec.unitProperties.append(UnitProperty(name: parts[0], value: parts.count > 1 ? parts[1] : ""))
    case "--cancel-when": cancelWhen = value
    case "--start-when": startWhen = value
    default: FileHandle.standardError.write(Data("unknown option \(option)\n".utf8)); exit(64)
    }
}
spec.argv = Array(arguments.dropFirst())

let launcher: TransientUnitLauncher
switch TransientUnitLauncher.connect() {
case .success(let connected): launcher = connected
case .failure(let error):
    emit(["event": "unavailable", "code": "\(error.code)", "message": error.message])
    exit(2)
}

if let startWhen {
    emit(["event": "connected", "address": launcher.address])
    while access(startWhen, F_OK) != 0 { try? await Task.sleep(for: .milliseconds(100)) }
}
let run = Task {
    await launcher.run(spec) { start in
        emit(["event": "started", "pid": start.pid.map { Int($0) } ?? 0, "unit": start.unit ?? "", "address": launcher.address])
    }
}
if let cancelWhen {
    Task {
        while access(cancelWhen, F_OK) != 0 { try? await Task.sleep(for: .milliseconds(100)) }
        run.cancel()
    }
}
let outcome = await run.value
var line: [String: Any] = ["event": "outcome", "tail": outcome.outputTail,
                           "seconds": Double(outcome.duration.components.seconds) + Double(outcome.duration.components.attoseconds) / 1e18]
switch outcome.termination {
case .exited(let status): line["termination"] = "exited"; line["status"] = Int(status)
case .signalled(let signal): line["termination"] = "signalled"; line["status"] = Int(signal)
case .timedOut: line["termination"] = "timedOut"
case .stopped: line["termination"] = "stopped"
case .failedToStart(let reason): line["termination"] = "failedToStart"; line["reason"] = reason
}
emit(line)
