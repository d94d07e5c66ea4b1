import EventBusKit
import EventBusHost
import Foundation
import SystemCalls

// Memory: bytes per subscription (bus sinks, bus subscriptions through the bus's own filter and
// through Combine's Sink, beside OpenCombine's PassthroughSubject sinks, in the same run), and the
// resident set of an idle eventbusd started from a minimal config.

/// Resident bytes of this process (/proc/self/statm).
private func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return fields.count > 1 ? (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE))) : 0
}

/// The kinds of subscription measured, each in its own child process (a fresh heap: freed memory
/// of an earlier measurement would otherwise be reused and hide the growth).
private let footprintVariants: [(name: String, label: String)] = [
    ("bus-sink", "Bus → sink"),
    ("bus-filter-sink", "Bus → filter → sink (bus's own filter)"),
    ("bus-combine-sink", "Bus → OpenCombine Sink (generic path)"),
    ("mailbox-sink", "Bus → Mailbox → sink"),
    ("subject-sink", "PassthroughSubject → sink (anchor)"),
]

/// In the child: makes `count` subscriptions of `variant`, keeps them (as the caller's
/// cancellables), posts one event so routes are built, and prints the resident growth per
/// subscription.
func footprintChild(variant: String, count: Int) {
    let event = Event(name: "bench.tick")
    var kept: [AnyCancellable] = []
    kept.reserveCapacity(count)
    let bus = Bus()
    let mailbox = Mailbox(label: "footprint")
    let subject = PassthroughSubject<Event, Never>()
    let pattern = try! EventPattern("bench.*")
    bus.post(event)  // warm: first-use allocations are not per subscription
    let before = residentBytes()
    for _ in 0..<count {
        switch variant {
        case "bus-sink": kept.append(bus.publisher(for: pattern).sink { _ in })
        case "bus-filter-sink": kept.append(bus.publisher(for: pattern).filter { _ in true }.sink { _ in })
        case "bus-combine-sink": kept.append(bus.publisher(for: pattern).eraseToAnyPublisher().sink { _ in })
        case "mailbox-sink": kept.append(bus.scoped(to: mailbox).publisher(for: pattern).sink { _ in })
        case "subject-sink": kept.append(subject.sink { _ in })
        default: fatalError("unknown footprint variant \(variant)")
        }
    }
    bus.post(event)
    subject.send(event)
    _ = mailbox.drain(timeout: .seconds(60))
    let after = residentBytes()
    withExtendedLifetime(kept) {}
    print(Double(after - before) / Double(count))
}

func subscriptionFootprint(count: Int) {
    print("Resident bytes per subscription (\(count) subscriptions to one pattern, kept as AnyCancellables;")
    print("each kind measured in a fresh child process)")
    for (variant, label) in footprintVariants {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
        child.arguments = ["footprint-child", variant, String(count)]
        let pipe = Pipe()
        child.standardOutput = pipe
        do { try child.run() } catch {
            print("  \(label): could not start the child: \(error)")
            continue
        }
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        child.waitUntilExit()
        let bytes = Double(output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? .nan
        print("  " + label.padding(toLength: 42, withPad: " ", startingAt: 0) + String(format: "%7.0f", bytes))
    }
    print("Target: ≤ 1024 bytes per bus subscription.")
}

/// Starts the built eventbusd (next to this benchmark) idle, twice: with a minimal config — a
/// control socket, no sources, no modules — and with `examples/eventbus.yaml` (timers, a
/// recursive file watch, a journal watch, three modules in workers), as the README runs it.
/// Each time it waits until the host says it is ready and has idled `idleSeconds`, and reports
/// its VmRSS (file-backed and anonymous) and VmHWM from /proc.
func idleHostFootprint(idleSeconds: Double) {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    let binaries = (exe as NSString).deletingLastPathComponent
    let eventbusd = binaries + "/eventbusd"
    guard System.isAccessible(eventbusd, .executable) else {
        print("Idle host RSS: \(eventbusd) not built (swift build -c release --product eventbusd)")
        return
    }
    var template = Array("/tmp/eventbus-bench-rss-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else {
        print("Idle host RSS: mkdtemp failed (errno \(errno))")
        return
    }
    let directory = String(cString: made)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let minimal = directory + "/eventbus.yaml"
    _ = FileManager.default.createFile(atPath: minimal, contents: Data("""
        shutdown_timeout: 5s
        control: {socket: \(directory)/control.sock}

        """.utf8))
    idleHost(eventbusd, ["--config", minimal], label: "minimal config", idleSeconds: idleSeconds, directory: directory)
    // .build/<triple>/release/eventbus-bench → the package root.
    let root = ((binaries as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent as NSString
    let example = root.deletingLastPathComponent + "/examples/eventbus.yaml"
    if System.isAccessible(example, .readable) {
        idleHost(eventbusd, ["--config", example, "--socket", directory + "/control.sock"], label: "examples/eventbus.yaml",
                 idleSeconds: max(idleSeconds, 10), directory: directory)
    }
    print("Target: RSS ≤ 30 MB.")
}

private func idleHost(_ eventbusd: String, _ arguments: [String], label: String, idleSeconds: Double, directory: String) {
    let log = directory + "/eventbusd.log"
    _ = FileManager.default.createFile(atPath: log, contents: nil)
    let process = Process()
    process.executableURL = URL(fileURLWithPath: eventbusd)
    process.arguments = arguments
    let handle = FileHandle(forWritingAtPath: log)!
    process.standardOutput = handle
    process.standardError = handle
    do { try process.run() } catch {
        print("Idle host RSS: could not start \(eventbusd): \(error)")
        return
    }
    let deadline = Date().addingTimeInterval(30)
    var ready = false
    while Date() < deadline, process.isRunning {
        if let text = try? String(contentsOfFile: log, encoding: .utf8), text.contains(" ready") { ready = true; break }
        System.sleep(for: .microseconds(10_000))
    }
    guard ready else {
        print("Idle host RSS: eventbusd did not get ready: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        if process.isRunning { try? System.sendSignal(SIGKILL, to: process.processIdentifier) }
        return
    }
    Thread.sleep(forTimeInterval: idleSeconds)
    let status = procStatus(process.processIdentifier)
    func field(_ name: String) -> String { status[name] ?? "?" }
    try? System.sendSignal(SIGTERM, to: process.processIdentifier)
    process.waitUntilExit()
    print("Idle eventbusd (\(label), \(idleSeconds) s after ready): VmRSS \(field("VmRSS")) (file \(field("RssFile")), anonymous \(field("RssAnon"))), "
          + "VmHWM \(field("VmHWM")), threads \(field("Threads")); exit \(process.terminationStatus)")
}

/// The fields of /proc/PID/status (fopen: Foundation reads /proc files as empty).
private func procStatus(_ pid: Int32) -> [String: String] {
    guard let file = fopen("/proc/\(pid)/status", "r") else { return [:] }
    defer { fclose(file) }
    var fields: [String: String] = [:]
    var line = [CChar](repeating: 0, count: 512)
    while fgets(&line, Int32(line.count), file) != nil {
        let text = String(cString: line)
        guard let colon = text.firstIndex(of: ":") else { continue }
        fields[String(text[..<colon])] = text[text.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
    }
    return fields
}
