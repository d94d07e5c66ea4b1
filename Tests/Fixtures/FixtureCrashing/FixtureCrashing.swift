import EventBusKit
#if canImport(Glibc)
import Glibc
#endif

/// Test fixture: crashes its process with `fatalError` on `test.crash`, or in `deactivate` after
/// `test.crash-at-stop`; counts other `test.>` events and on `test.report` posts
/// `result.crashing` with the count and what it saw of the events numbered by a field `n`
/// (``Numbered``) and of gap notices. Logs when it activates, so a test sees each (re)start.
/// In a worker only: on `test.garbage` it writes what its fields say straight into the worker's
/// socket to the host (fd 3), as a hostile or broken module could (``Garbage``). On `test.spam`
/// it logs `count` lines at once. On `test.children` it starts `forks` children with `fork()` (which
/// keep the worker's socket open) and `spawns` `sleep` processes, and posts `result.children`
/// with their pids (`pids`, comma-separated); on `test.burn` it spins its CPU until killed.
final class Crashing: EventBusModule {
    let name = "fixture-crashing"
    let version = "1.0.0"
    private var count = 0
    private var crashAtStop = false
    private var numbered = Numbered()

    func activate(_ context: ModuleContext) throws {
        context.log.info("crashing fixture active")
        try context.bus.publisher(for: "test.>").sink { [unowned self] event in
            if let gap = event.gap {
                numbered.record(gap)
                return
            }
            if case .int(let n)? = event.fields["n"] { numbered.record(n) }
            switch event.name {
            case "test.crash": fatalError("fixture crashes on purpose")
            case "test.crash-at-stop": crashAtStop = true
            case "test.garbage": Garbage.write(event)
            case "test.children":
                let pids = Children.start(forks: Int(event["forks"]?.intValue ?? 0), spawns: Int(event["spawns"]?.intValue ?? 0))
                context.bus.post("result.children", source: "crashing", fields: ["pids": .string(pids.map(String.init).joined(separator: ","))])
            case "test.burn":
                var spin: UInt64 = 0
                while true { spin &+= 1 }
            case "test.spam":
                for line in 0..<(event["count"]?.intValue ?? 0) { context.log.info("spam line \(line)") }
            case "test.report":
                context.bus.post("result.crashing", source: "crashing", fields: numbered.fields.merging(["count": .int(Int64(count))]) { $1 })
            default: count += 1
            }
        }
        .store(in: &context.cancellables)
    }

    func deactivate() {
        if crashAtStop { fatalError("fixture crashes in deactivate on purpose") }
    }
}

/// What the module saw of events numbered 1, 2, 3… by a field `n`: how many, the first and last
/// number, how many came out of order or twice (`disorder`) or after a skipped number
/// (`skips`); and of gap notices: how many, their drops and sequence range.
struct Numbered {
    var count = 0
    var first: Int64 = 0
    var last: Int64 = 0
    var disorder = 0
    var skips = 0
    var gaps = 0
    var gapDropped: UInt64 = 0
    var gapFirst: UInt64 = 0
    var gapLast: UInt64 = 0

    mutating func record(_ n: Int64) {
        if count == 0 { first = n } else if n <= last { disorder += 1 } else if n > last + 1 { skips += 1 }
        count += 1
        last = max(last, n)
    }

    mutating func record(_ gap: Gap) {
        if gaps == 0 { gapFirst = gap.firstSequence }
        gaps += 1
        gapDropped += UInt64(gap.dropped)
        gapLast = gap.lastSequence
    }

    var fields: [String: FieldValue] {
        ["numbered": .int(Int64(count)), "first_n": .int(first), "last_n": .int(last), "disorder": .int(Int64(disorder)),
         "skips": .int(Int64(skips)), "gaps": .int(Int64(gaps)), "gap_dropped": .int(Int64(gapDropped)),
         "gap_first": .int(Int64(gapFirst)), "gap_last": .int(Int64(gapLast))]
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Crashing.init) }

/// Bytes for the host's frame reader: `random` (`count` bytes from `seed`), `frame` (a frame of
/// type `type` with `count` random payload bytes from `seed`), or `short` (a frame header that
/// promises `count` payload bytes and brings 3).
enum Garbage {
    static func write(_ event: Event) {
        guard case .int(let seed)? = event.fields["seed"], case .int(let count)? = event.fields["count"],
              case .string(let mode)? = event.fields["mode"] else { return }
        var state = UInt64(bitPattern: seed) | 1
        func random() -> UInt8 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return UInt8(truncatingIfNeeded: state)
        }
        var bytes: [UInt8] = []
        switch mode {
        case "random":
            bytes = (0..<count).map { _ in random() }
        case "frame", "short":
            let type = UInt8(truncatingIfNeeded: event.fields["type"]?.intValue ?? 0)
            let length = UInt32(truncatingIfNeeded: count + 1)
            bytes = withUnsafeBytes(of: length.littleEndian) { Array($0) } + [type]
            bytes += (0..<(mode == "short" ? 3 : count)).map { _ in random() }
        default:
            return
        }
        _ = bytes.withUnsafeBytes { Glibc.write(3, $0.baseAddress, $0.count) }
    }
}

/// What a module may start: forked copies of itself and other programs.
enum Children {
    static func start(forks: Int, spawns: Int) -> [pid_t] {
        var pids: [pid_t] = []
        for _ in 0..<forks {
            let pid = fork()
            if pid == 0 {
                // The child of a threaded process may only call async-signal-safe functions.
                while true { pause() }
            }
            if pid > 0 { pids.append(pid) }
        }
        for _ in 0..<spawns {
            var pid: pid_t = 0
            let words: [String] = ["/bin/sleep", "1000"]
            let arguments: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
            defer { arguments.forEach { free($0) } }
            if posix_spawn(&pid, "/bin/sleep", nil, nil, arguments, environ) == 0 { pids.append(pid) }
        }
        return pids
    }
}
