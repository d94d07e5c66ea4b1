import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import Testing
@testable import EventBusHost

/// The pieces of the control socket without a socket: JSON in and out, the event encoding, the
/// replay ring, a client's bounded feed, the config section.
@Suite struct ControlProtocolTests {
    // MARK: JSON

    @Test func parsesEveryJSONTypeKeepingIntegersDoublesAndBooleansApart() throws {
        let value = try JSON.parse(#" {"i": 42, "n": -7, "d": 1.5, "e": 2e3, "z": 0.0, "t": true, "f": false, "s": "x", "null": null, "a": [1, "two", [3]], "o": {}} "#)
        #expect(value == ["i": .int(42), "n": .int(-7), "d": .double(1.5), "e": .double(2000), "z": .double(0), "t": .bool(true),
                          "f": .bool(false), "s": "x", "null": .null, "a": [.int(1), "two", [.int(3)]], "o": .object([:])])
        #expect(try JSON.parse("9223372036854775807") == .int(.max))
        #expect(try JSON.parse("-9223372036854775808") == .int(.min))
        #expect(try JSON.parse("[-0, 0, 10, -10]") == [.int(0), .int(0), .int(10), .int(-10)])
        // Non-ASCII text is still validated as UTF-8 (ASCII needs no check).
        let invalid: [UInt8] = [0x22, 0x61, 0xC3, 0x28, 0x22]
        #expect(throws: JSONParseError.self) { try invalid.withUnsafeBufferPointer { try JSON.parse($0) } }
        #expect(try JSON.parse("9.3e18") == .double(9.3e18), "a fraction or exponent is a double, whatever its size")
        #expect(try JSON.parse(#""tab\there \"q\" \\ \/ \u00e9 \ud83d\ude00""#) == "tab\there \"q\" \\ / é 😀")
    }

    @Test func refusesMalformedJSONSayingWhere() {
        for (text, message) in [
            ("", "unexpected end of input"), ("{\"a\" 1}", "expected ':'"), ("[1 2]", "expected ',' or ']'"),
            ("\"open", "unterminated string"), (#""\x""#, "invalid escape"), ("01", "unexpected text after"),
            ("1.", "digits must follow '.'"), ("tru", "invalid literal"), (#""\ud83d""#, "unpaired surrogate"),
            ("{} {}", "unexpected text after"), ("\"a\u{01}\"", "control character"),
            ("9223372036854775808", "integer out of range"), ("[-9223372036854775809]", "integer out of range"),
            (#"{"a": 1, "b": 2, "a": 3}"#, #"the key "a" appears twice"#),
            (String(repeating: "[", count: 100), "nested more than 64 levels"),
            ("@", "unexpected character '@'"), ("\u{1B}[31m", "unexpected byte 0x1B"), ("\u{7F}", "unexpected byte 0x7F"),
        ] {
            #expect(throws: JSONParseError.self, "\(text)") { try JSON.parse(text) }
            do { _ = try JSON.parse(text) } catch { #expect(error.message.contains(message), "\(text): \(error)") }
        }
    }

    @Test func writesJSONThatReadsBackTheSame() throws {
        let strings = ["plain", "quote \" backslash \\ newline \n tab \t cr \r bell \u{07} nul \u{0}", "é 😀 日本", ""]
        for text in strings {
            var writer = JSONWriter()
            writer.string(text)
            #expect(try JSON.parse(String(decoding: writer.bytes, as: UTF8.self)) == .string(text))
        }
        var writer = JSONWriter()
        writer.value(["b": [.int(Int64.min), .int(Int64.max), .double(1), .double(.infinity), .bool(true), .null], "a": "x"])
        #expect(String(decoding: writer.bytes, as: UTF8.self) == #"{"a":"x","b":[-9223372036854775808,9223372036854775807,1.0,null,true,null]}"#)
    }

    // MARK: Events

    /// Events posted on a real bus, so they carry real sequence numbers.
    private func postedEvents(_ count: Int, fields: [String: FieldValue] = [:]) -> [Event] {
        let bus = Bus()
        let events = Collected<[Event]>([])
        let subscription = bus.publisher(for: EventPattern.all).sink { event in events.update { $0.append(event) } }
        for index in 1...count { bus.post("test.e\(index)", fields: fields) }
        subscription.cancel()
        return events.value
    }

    @Test func encodesAnEventAsOneLineWithStableNamesAndTypedFields() throws {
        let date = Date(timeIntervalSince1970: 1_741_183_331.5)
        let event = postedEvents(1, fields: ["s": "a \"b\"", "i": 3, "d": 0.25, "b": true, "when": .date(date)])[0]
        var encoder = EventJSON()
        var writer = JSONWriter()
        encoder.event(event, into: &writer)
        let line = String(decoding: writer.bytes, as: UTF8.self)
        #expect(line.hasPrefix(#"{"type":"event","seq":1,"name":"test.e1","source":"user","time":""#))
        #expect(line.hasSuffix(#""fields":{"b":true,"d":0.25,"i":3,"s":"a \"b\"","when":"2025-03-05T14:02:11.500000Z"}}"# + "\n"))
        #expect(line.filter { $0 == "\n" }.count == 1)
        let parsed = try JSON.parse(line)
        #expect(parsed["mono"]?.intValue == Int64(event.monotonicNanoseconds))
        let time = try #require(parsed["time"]?.stringValue)
        #expect(time.count == 27 && time.hasSuffix("Z"), "\(time)")
    }

    @Test func encodesManyFieldsInSortedKeyOrderWhateverTheDictionarysOrder() throws {
        let keys = (0..<40).map { "k\(($0 * 17) % 40)" } + ["Z", "a", "é", "_", "k"]
        let event = postedEvents(1, fields: Dictionary(uniqueKeysWithValues: keys.enumerated().map { ($1, .int(Int64($0))) }))[0]
        var encoder = EventJSON()
        var writer = JSONWriter()
        encoder.event(event, into: &writer)
        let line = String(decoding: writer.bytes, as: UTF8.self)
        let fieldsText = try #require(line.range(of: #""fields":{"#)).upperBound
        let written = line[fieldsText...].split(separator: ",").map { $0.split(separator: ":")[0].trimmingCharacters(in: CharacterSet(charactersIn: "\"")) }
        #expect(written == keys.sorted(), "\(line)")
        #expect(try JSON.parse(line)["fields"]?.objectValue?.count == keys.count)
    }

    /// The event encoder writes through a pointer, not through ``JSONWriter``: its text must be
    /// what the writer writes for the same values — escapes, integer extremes, doubles, non-finite
    /// numbers, non-ASCII — and a line longer than any before (its buffer grows) must come out whole.
    @Test func encodesFieldValuesExactlyAsTheJSONWriterDoes() throws {
        let awkward = ["quote \" backslash \\ newline \n tab \t cr \r bell \u{07} nul \u{0} unit \u{1F}", "é 😀 日本", "",
                       String(repeating: "\"", count: 3000), String(repeating: "long text ", count: 500)]
        var fields: [String: FieldValue] = ["min": .int(.min), "max": .int(.max), "zero": .int(0), "neg": .int(-42),
                                            "pi": .double(.pi), "tiny": .double(-2.2250738585072014e-308), "one": .double(1),
                                            "inf": .double(.infinity), "nan": .double(.nan), "yes": true, "no": false]
        for (index, text) in awkward.enumerated() { fields["s\(index) \u{1}\"key\""] = .string(text) }
        let event = postedEvents(1, fields: fields)[0]
        var expected = JSONWriter()
        for (index, key) in fields.keys.sorted().enumerated() {
            if index > 0 { expected.byte(UInt8(ascii: ",")) }
            expected.string(key)
            expected.byte(UInt8(ascii: ":"))
            switch fields[key]! {
            case .string(let text): expected.string(text)
            case .int(let number): expected.int(number)
            case .double(let number): expected.double(number)
            case .bool(let flag): expected.bool(flag)
            case .date: Issue.record("no dates here")
            }
        }
        var encoder = EventJSON()
        var writer = JSONWriter()
        encoder.event(postedEvents(1, fields: ["a": 1])[0], into: &writer)  // a short line first
        writer.bytes.removeAll()
        encoder.event(event, into: &writer)
        let line = String(decoding: writer.bytes, as: UTF8.self)
        let fieldsText = String(decoding: expected.bytes, as: UTF8.self)
        #expect(line.hasSuffix(#""fields":{"# + fieldsText + "}}\n"), "\(line)")
        #expect(line.hasPrefix(#"{"type":"event","seq":\#(event.sequence),"name":"test.e1","source":"user","time":""#))
        #expect(try JSON.parse(line)["fields"]?.objectValue?.count == fields.count)
    }

    /// The encoder writes short decimals (12.5, 0.25) itself rather than through
    /// `Double.description`: every double — short decimals of every width and sign, the edges of
    /// the plain notation, arbitrary bit patterns — must come out as `description` writes it.
    @Test func writesEveryDoubleExactlyAsItsDescription() {
        var random = SplitMix(seed: 33)
        var values: [Double] = [0, -0.0, 1, -1, 0.1, 0.3, 1.0 / 3, 12.5, -12.5, 1200, 0.05, 1e-4, 9.99e-5, 1.5e-4, 0.00015,
                                1e11, 99_999_999_999.9999, 1e15 - 1, 1e15, 1e15 + 2, 123_456_789_012_345.6, 9_007_199_254_740_992,
                                1e16, .leastNonzeroMagnitude, .greatestFiniteMagnitude, -2.2250738585072014e-308, .pi]
        for places in 0...6 {
            for _ in 0..<3_000 {
                let digits = Int(random.next() % 17)
                var whole: UInt64 = 1
                for _ in 0..<digits { whole *= 10 }
                let units = Double(random.next() % whole)
                var scale = 1.0
                for _ in 0..<places { scale *= 10 }
                values.append((random.next() & 1 == 0 ? 1 : -1) * units / scale)
            }
        }
        for _ in 0..<20_000 {
            let value = Double(bitPattern: random.next())
            if value.isFinite { values.append(value) }
        }
        var buffer = [UInt8](repeating: 0, count: 64)
        var mismatches: [String] = []
        for value in values {
            let text = buffer.withUnsafeMutableBufferPointer { bytes in
                var cursor = LineCursor(bytes.baseAddress!)
                cursor.double(value)
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[0..<cursor.count]), as: UTF8.self)
            }
            if text != value.description { mismatches.append("\(value.description) written as \(text)") }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(10))")
    }

    /// Integers are written two digits at a time: every width, its edges and zero padding must
    /// come out as their decimal text.
    @Test func writesEveryIntegerAsItsDecimalText() {
        var random = SplitMix(seed: 7)
        var values: [Int64] = [0, 1, -1, 9, 10, 99, 100, 101, 999, 1000, .max, .min, .max - 1, .min + 1]
        var power: Int64 = 1
        for _ in 0..<18 {
            power *= 10
            values += [power - 1, power, power + 1, -power, -(power - 1)]
        }
        for _ in 0..<20_000 { values.append(Int64(bitPattern: random.next()) >> (random.next() % 63)) }
        var buffer = [UInt8](repeating: 0, count: 64)
        func written(_ write: (inout LineCursor) -> Void) -> String {
            buffer.withUnsafeMutableBufferPointer { bytes in
                var cursor = LineCursor(bytes.baseAddress!)
                write(&cursor)
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[0..<cursor.count]), as: UTF8.self)
            }
        }
        let mismatches = values.filter { value in written { $0.int(value) } != String(value) }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(10))")
        #expect(written { $0.unsigned(.max) } == String(UInt64.max))
        #expect(written { $0.digits(42, 6) } == "000042")
        #expect(written { $0.digits(1_234_567, 6) } == "234567")  // higher digits cut
        #expect(written { $0.digits(7, 1) } == "7")
        #expect(written { $0.digits(5, 0) }.isEmpty)
    }

    // MARK: Replay ring

    @Test func theRingKeepsTheNewestAndKnowsWhatItLost() {
        let events = postedEvents(5)
        var ring = ReplayRing(capacity: 3, byteCapacity: .max)
        #expect(ring.oldestSequence == 1 && ring.newestSequence == 0)
        events.forEach { ring.append($0, bytes: $0.estimatedBytes) }
        #expect(ring.oldestSequence == 3 && ring.newestSequence == 5)
        #expect(ring.events(from: 1) { _ in true }.map(\.sequence) == [3, 4, 5])
        #expect(ring.events(from: 4) { _ in true }.map(\.sequence) == [4, 5])
        #expect(ring.events(from: 6) { _ in true }.isEmpty)
        #expect(ring.last(2) { _ in true }.map(\.sequence) == [4, 5])
        #expect(ring.last(9) { $0.name != "test.e4" }.map(\.sequence) == [3, 5])
        ring.resize(capacity: 2, byteCapacity: .max)
        #expect(ring.events(from: 1) { _ in true }.map(\.sequence) == [4, 5])
        ring.resize(capacity: 0, byteCapacity: .max)
        #expect(ring.count == 0 && ring.oldestSequence == 6)
    }

    @Test func theRingEvictsTheOldestWhileOverItsBytesAndHoldsNoEventLargerThanThem() {
        let events = postedEvents(6)
        let size = events[0].estimatedBytes  // the names are all as long: every event costs this
        #expect(events.allSatisfy { $0.estimatedBytes == size })
        var ring = ReplayRing(capacity: 100, byteCapacity: 3 * size)
        var evicted = 0
        events[0..<5].forEach { evicted += ring.append($0, bytes: size) }
        #expect(ring.events(from: 1) { _ in true }.map(\.sequence) == [3, 4, 5])
        #expect(ring.bytes == 3 * size && evicted == 2 * size)
        #expect(ring.oldestSequence == 3 && ring.newestEvictedTime == events[1].wallTime)
        ring.resize(capacity: 100, byteCapacity: 2 * size)
        #expect(ring.events(from: 1) { _ in true }.map(\.sequence) == [4, 5])
        // Larger than the whole budget: not held, and nothing before it is either.
        #expect(ring.append(events[5], bytes: 2 * size + 1) == 2 * size)
        #expect(ring.count == 0 && ring.bytes == 0 && ring.oldestSequence == 7)
    }

    // MARK: A client's feed

    @Test func aFeedOverItsBytesDropsIntoAGapButAlwaysTakesOneEventWhenEmpty() {
        let events = postedEvents(4)
        let feed = TailFeed(patterns: [EventPattern.all], fromSequence: 0, capacity: 100, byteCapacity: 1000,
                            client: (id: 1, userID: 0, processID: 0), wake: {})
        feed.offer(events[0], bytes: 5000)  // larger than the budget, but the buffer is empty
        feed.offer(events[1], bytes: 10)  // over the budget: dropped
        #expect(feed.statistics.queued == 1 && feed.statistics.queuedBytes == 5000 && feed.statistics.dropped == 1)
        var items: [TailFeed.Item] = []
        feed.take(upTo: 100, bytes: .max, into: &items)
        #expect(feed.statistics.queued == 0 && feed.statistics.queuedBytes == 0)
        feed.offer(events[2], bytes: 600)
        feed.offer(events[3], bytes: 600)  // 1200 > 1000: dropped
        items.removeAll()
        feed.take(upTo: 100, bytes: 1, into: &items)  // a byte limit still takes one item
        #expect(items.count == 1)
        feed.take(upTo: 100, bytes: .max, into: &items)
        guard items.count == 2, case .event(let kept, 600) = items[0],
              case .gap(1, 4, 4, .slowClient) = items[1] else {
            Issue.record("unexpected items \(items)")
            return
        }
        #expect(kept.sequence == 3)
        #expect(feed.statistics.dropped == 2)
    }

    /// The fan-out matches a name against the clients' patterns once per run of that name: a
    /// client that joins or leaves during the run must be seen at the next event all the same.
    @Test func theFanOutOffersEachEventToTheFeedsAttachedWhenItArrives() {
        let bus = Bus()
        let server = ControlServer(bus: bus, logger: Logger(label: "test"), snapshot: { ControlServer.HostSnapshot(configFile: "", modules: []) })
        func feed(_ pattern: String, id: Int) -> TailFeed {
            TailFeed(patterns: [try! EventPattern(pattern)], fromSequence: 0, capacity: 100, client: (id: id, userID: 0, processID: 0), wake: {})
        }
        func sequences(_ feed: TailFeed) -> [UInt64] {
            var items: [TailFeed.Item] = []
            feed.take(upTo: 100, bytes: .max, into: &items)
            return items.compactMap { if case .event(let event, _) = $0 { event.sequence } else { nil } }
        }
        let posted = Collected<[Event]>([])
        let subscription = bus.publisher(for: EventPattern.all).sink { event in posted.update { $0.append(event) } }
        for name in ["a.one", "a.one", "a.one", "a.one", "b.two", "a.one"] { bus.post(name) }
        subscription.cancel()
        let events = posted.value
        #expect(events.map(\.sequence) == [1, 2, 3, 4, 5, 6])
        let first = feed("a.>", id: 1)
        let second = feed("a.one", id: 2)
        let other = feed("b.>", id: 3)
        _ = server.attach(first, since: nil, last: nil)
        _ = server.attach(other, since: nil, last: nil)
        server.deliver(events[0])
        server.deliver(events[1])
        _ = server.attach(second, since: nil, last: nil)  // joins while "a.one" is the cached name
        server.deliver(events[2])
        server.detach(first)  // leaves while it is still cached
        server.deliver(events[3])
        server.deliver(events[4])
        server.deliver(events[5])
        #expect(sequences(first) == [1, 2, 3])
        #expect(sequences(second) == [3, 4, 6])
        #expect(sequences(other) == [5])
    }

    /// What durable imports wait for before they record a position: every feed has written what
    /// it was offered through a sequence (or has been offered nothing up to it), and the
    /// fan-out has reached it.
    @Test func theServerSaysWhenEveryFeedHasBeenHandedASequence() {
        let bus = Bus()
        let server = ControlServer(bus: bus, logger: Logger(label: "test"), snapshot: { ControlServer.HostSnapshot(configFile: "", modules: []) })
        let events = postedEvents(6)
        let wanting = TailFeed(patterns: [try! EventPattern("test.>")], fromSequence: 0, capacity: 100, client: (id: 1, userID: 0, processID: 0), wake: {})
        let other = TailFeed(patterns: [try! EventPattern("zzz")], fromSequence: 0, capacity: 100, client: (id: 2, userID: 0, processID: 0), wake: {})
        #expect(server.handedToEveryTail(through: 0))
        _ = server.attach(wanting, since: nil, last: nil)
        _ = server.attach(other, since: nil, last: nil)
        #expect(!server.handedToEveryTail(through: 1), "not fanned out yet")
        for event in events[0..<3] { server.deliver(event) }
        #expect(!server.handedToEveryTail(through: 1))
        #expect(other.hasHandedOver(through: 3), "offered nothing")
        var items: [TailFeed.Item] = []
        wanting.take(upTo: 2, bytes: .max, into: &items)
        #expect(!server.handedToEveryTail(through: 1), "taken is not written")
        wanting.didWrite(through: 2)
        #expect(server.handedToEveryTail(through: 2))
        #expect(!server.handedToEveryTail(through: 3))
        wanting.take(upTo: 100, bytes: .max, into: &items)
        wanting.didWrite(through: 3)
        #expect(server.handedToEveryTail(through: 3))
        #expect(!server.handedToEveryTail(through: 4), "not fanned out yet")
        server.detach(wanting)
        server.detach(other)
    }

    @Test func aFullFeedDropsTheNewestIntoOneGapAndWakesOncePerIdleSpell() {
        let events = postedEvents(6)
        let wakes = Collected(0)
        let feed = TailFeed(patterns: [EventPattern.all], fromSequence: 0, capacity: 2,
                            client: (id: 1, userID: 0, processID: 0), wake: { wakes.update { $0 += 1 } })
        events[0..<5].forEach { feed.offer($0, bytes: $0.estimatedBytes) }
        feed.offer(events[1], bytes: events[1].estimatedBytes)  // again, as through a source subscription: ignored
        #expect(wakes.value == 1)
        var items: [TailFeed.Item] = []
        feed.take(upTo: 100, bytes: .max, into: &items)
        #expect(items.count == 3)
        guard case .event(let first, _) = items[0], case .event(let second, _) = items[1],
              case .gap(let dropped, let firstDropped, let lastDropped, .slowClient) = items[2] else {
            Issue.record("unexpected items \(items)")
            return
        }
        #expect([first.sequence, second.sequence, UInt64(dropped), firstDropped, lastDropped] == [1, 2, 3, 3, 5])
        items.removeAll()
        feed.take(upTo: 100, bytes: .max, into: &items)
        #expect(items.isEmpty)  // idle again: the next offer wakes
        feed.offer(events[5], bytes: events[5].estimatedBytes)
        #expect(wakes.value == 2)
        #expect(feed.statistics.dropped == 3)
    }

    // MARK: Config

    @Test func theControlSectionIsCheckedWithLines() throws {
        let config = try HostConfig.parse("""
            control:
              socket: run/control.sock
              tail_group: root
              client_buffer: 5
              replay_events: 0
            """, file: "e.yaml", directory: "/etc/eventbus")
        #expect(config.control == ControlSettings(socketPath: "/etc/eventbus/run/control.sock", tailGroup: .init(name: "root", id: 0),
                                                  clientBuffer: 5, replayEvents: 0))
        #expect(try HostConfig.parse("", file: "e.yaml", directory: "/").control.socketPath == ControlProtocol.defaultSocketPath())

        func error(_ yaml: String) -> String {
            do { _ = try HostConfig.parse(yaml, file: "e.yaml", directory: "/"); return "no error" } catch { return error.description }
        }
        #expect(error("control:\n  post_group: no-such-group-here\n") == "e.yaml:2: control.post_group: no group named \"no-such-group-here\" on this system")
        #expect(error("control:\n  sockett: /x\n").hasPrefix("e.yaml:2: control.sockett: unknown key (did you mean socket?); expected one of: socket, tail_group"))
        // Top-level keys get the same hint.
        #expect(error("modles: {}\n").hasPrefix("e.yaml:1: modles: unknown key (did you mean modules?); expected one of: sources, modules"), "\(error("modles: {}\n"))")
        #expect(error("zzz: 1\n").hasPrefix("e.yaml:1: zzz: unknown key; expected one of:"))
        #expect(error("control:\n  client_buffer: 0\n") == "e.yaml:2: control.client_buffer: must be at least 1, found 0")
        #expect(error("control:\n  watch_entries: 0\n") == "e.yaml:2: control.watch_entries: must be at least 1, found 0")
        #expect(try HostConfig.parse("control:\n  watch_entries: 500\n", file: "e.yaml", directory: "/").control.watchEntries == 500)
        #expect(try HostConfig.parse("", file: "e.yaml", directory: "/").control.handOutPatience == .seconds(10))
        #expect(try HostConfig.parse("control:\n  hand_out_patience: 10m\n", file: "e.yaml", directory: "/").control.handOutPatience == .seconds(600))
        #expect(error("control:\n  hand_out_patience: soon\n").hasPrefix("e.yaml:2: control.hand_out_patience: expected a duration"))
        #expect(error("control:\n  socket: /\(String(repeating: "x", count: 120))\n").contains("a socket path has at most 107 bytes"))
    }
}
