import ControlProtocol
import Foundation
import TestSupport
import Testing

/// Thousands of request lines no client would write — random bytes, valid requests with bytes
/// flipped, cut or repeated, and JSON of every shape under known and unknown ops and members —
/// sent to a real eventbusd on one connection. Each is answered by exactly one line of valid
/// JSON (an error, or the op's answer when the line happened to be a valid request), the
/// connection carries on, and the host serves everyone else as before.
///
/// Seeded: a failure names its seed and the line, so it can be replayed. Ops that would turn the
/// connection into a stream (`subscribe`) or walk the file system (`listing`) or re-read the
/// config (`reload`) are kept out of what happens to parse; their parsers see the random lines
/// that do not.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ControlFuzzTests {
    @Test(arguments: [UInt64(0x5EED_0001), 0x5EED_0002])
    func everyLineIsAnsweredWithOneJSONLineAndTheHostCarriesOn(seed: UInt64) async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        let (connection, _) = try rawConnection(socket)
        var random = SplitMix(seed: seed)

        var answered: [String: Int] = [:]
        for index in 0..<4_000 {
            let line = Self.line(&random)
            try connection.send(line + [UInt8(ascii: "\n")])
            let answer: JSON?
            do { answer = try connection.readJSON() } catch {
                Issue.record("seed \(seed), line \(index): the answer is not JSON (\(error)); the line was \(Self.shown(line))")
                return
            }
            guard let answer, case .string(let type)? = answer["type"] else {
                Issue.record("seed \(seed), line \(index): no answer line (\(String(describing: answer))); the line was \(Self.shown(line))")
                return
            }
            #expect(type != "event" && type != "gap", "seed \(seed), line \(index): a stream began for \(Self.shown(line))")
            answered[type == "error" ? (answer["code"]?.stringValue ?? "error") : type, default: 0] += 1
        }
        print("control fuzz, seed \(seed): \(answered.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        #expect(answered["bad_json", default: 0] > 0 && answered.count > 3, "the lines reached more than one path: \(answered)")

        // The same connection, and a new one, still work.
        try connection.send(Array(#"{"op": "status", "id": "after"}"#.utf8) + [UInt8(ascii: "\n")])
        #expect(try connection.readJSON()?["id"] == "after")
        let posted = try ask(socket, ["op": "post", "name": "user.after.fuzz"])
        #expect(posted["type"] == "posted", "\(posted)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }

    // MARK: Lines

    static let ops = ["post", "status", "modules", "rules", "stats", "metrics", "subscribe", "listing", "reload", "", "POST", "post\u{0}", "launch"]
    static let members = ["op", "id", "name", "fields", "events", "detail", "patterns", "since_seq", "match", "last",
                          "count", "files", "path", "recursive", "buffer", "hosts", "source", "", "a\u{1}b", "é"]
    static let templates = [
        #"{"op": "post", "name": "user.fuzz", "fields": {"n": 1, "ok": true, "r": 0.5, "s": "text"}}"#,
        #"{"op": "post", "id": 7, "name": "app.deploy.done", "fields": {"env": "prod"}}"#,
        #"{"op": "stats", "detail": true, "id": [1, {"x": null}]}"#,
        #"{"op": "status"}"#,
        #"{"op": "modules", "id": "m"}"#,
        #"{"op": "metrics"}"#,
        #"{"op": "post", "events": [{"name": "user.a", "fields": {"k": "v"}}, {"name": "user.b"}]}"#,
    ]

    static func line(_ random: inout SplitMix) -> [UInt8] {
        while true {
            let candidate: [UInt8]
            switch random.below(3) {
            case 0: candidate = randomBytes(&random)
            case 1: candidate = mutated(Array(templates[random.below(templates.count)].utf8), &random)
            default:
                var writer = JSONWriter()
                writer.value(randomRequest(&random))
                candidate = writer.bytes
            }
            if isAdmissible(candidate) { return candidate }
        }
    }

    /// Not blank (a blank line gets no answer), no newline inside, and not a request that would
    /// start a stream, a file walk or a reload.
    static func isAdmissible(_ line: [UInt8]) -> Bool {
        guard !line.contains(UInt8(ascii: "\n")),
              line.contains(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0D }) else { return false }
        guard let parsed = try? line.withUnsafeBufferPointer({ try JSON.parse($0) }),
              case .string(let op)? = parsed["op"] else { return true }
        return !["subscribe", "listing", "reload"].contains(op)
    }

    static func randomBytes(_ random: inout SplitMix) -> [UInt8] {
        (0..<(1 + random.below(200))).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    /// Bytes that change a JSON text's structure, and one that is not UTF-8 on its own.
    static let structural = Array("{}[]\",:\\0-e.".utf8) + [0xFF]

    static func mutated(_ template: [UInt8], _ random: inout SplitMix) -> [UInt8] {
        var bytes = template
        for _ in 0..<(1 + random.below(4)) where !bytes.isEmpty {
            let at = random.below(bytes.count)
            switch random.below(4) {
            case 0: bytes[at] = UInt8(truncatingIfNeeded: random.next())
            case 1: bytes.remove(at: at)
            case 2: bytes.insert(Self.structural[random.below(Self.structural.count)], at: at)
            default:
                let end = min(bytes.count, at + 1 + random.below(16))
                bytes.insert(contentsOf: bytes[at..<end], at: at)
            }
        }
        return bytes
    }

    static func randomRequest(_ random: inout SplitMix) -> JSON {
        var object: [String: JSON] = ["op": random.below(8) == 0 ? randomValue(&random, depth: 1) : .string(ops[random.below(ops.count)])]
        for _ in 0..<random.below(6) {
            object[members[random.below(members.count)]] = randomValue(&random, depth: 3)
        }
        return .object(object)
    }

    static func randomValue(_ random: inout SplitMix, depth: Int) -> JSON {
        switch random.below(depth > 0 ? 10 : 7) {
        case 0: return .null
        case 1: return .bool(random.below(2) == 0)
        case 2: return .int([0, -1, 1, .max, .min, Int64(random.below(1_000_000))][random.below(6)])
        case 3: return .double([0.5, -0.0, 1e308, -1e-308, 3.25][random.below(5)])
        case 4: return .string(["", "user.fuzz", "a.*", ">", "user..x", "\u{0}\u{1F}", "grüße ✓", String(repeating: "x", count: 300)][random.below(8)])
        case 5: return .string("user." + String(random.next() % 100_000))
        case 6: return .string(members[random.below(members.count)])
        case 7, 8:
            return .array((0..<random.below(4)).map { _ in randomValue(&random, depth: depth - 1) })
        default:
            var object: [String: JSON] = [:]
            for _ in 0..<random.below(4) { object[members[random.below(members.count)]] = randomValue(&random, depth: depth - 1) }
            return .object(object)
        }
    }

    static func shown(_ line: [UInt8]) -> String {
        String(decoding: line.prefix(300), as: UTF8.self).debugDescription
    }
}
