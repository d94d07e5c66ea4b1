@_spi(EventBusHost) import EventBusKit
import Foundation
@testable import NATSBridge
import Testing

/// The bridge's buffers are bounded in bytes as well as in count: the export queue (and what the
/// exporter holds of it), a core subscription's batch, the importer's shape cache, a gap's names.
@Suite struct BridgeBytesUnitTests {
    static let large = String(repeating: "x", count: 200_000)

    static func event(_ n: Int, _ pad: String = large) -> Event {
        Event(name: "app.large", source: "test", fields: ["n": .int(Int64(n)), "pad": .string(pad)])
    }

    static func dropped(_ gaps: GapBook) -> [BridgeGap.Kind: Int] {
        Dictionary(gaps.take().map { ($0.0.kind, $0.0.count) }, uniquingKeysWith: +)
    }

    @Test func pastItsBytesTheQueueDropsTheNewestAndCountsThem() {
        let gaps = GapBook()
        let queue = ExportQueue(capacity: 100_000, byteCapacity: 1 << 20, gaps: gaps)
        let size = Self.event(1).estimatedBytes
        #expect(size > 200_000 && 5 * size <= 1 << 20 && 6 * size > 1 << 20)
        for n in 1...20 { queue.offer(Self.event(n)) }
        #expect(queue.count == 5, "five of 200 kB fit in 1 MiB")
        #expect(queue.bytes == 5 * size)
        #expect(Self.dropped(gaps) == [.exportOverflow: 15])
        // The newest were dropped: the first five wait, in order.
        var batch: [Event] = [], sizes: [Int] = []
        #expect(queue.take(max: 256, into: &batch, sizes: &sizes))
        #expect(batch.map { $0["n"]?.intValue } == [1, 2, 3, 4, 5])
        #expect(sizes == Array(repeating: size, count: 5))
    }

    @Test func theBatchInHandCountsUntilItIsReleased() {
        let gaps = GapBook()
        let queue = ExportQueue(capacity: 100_000, byteCapacity: 1 << 20, gaps: gaps)
        for n in 1...5 { queue.offer(Self.event(n)) }
        var batch: [Event] = [], sizes: [Int] = []
        #expect(queue.take(max: 256, into: &batch, sizes: &sizes))
        #expect(queue.count == 0)
        // Taken, not released: the exporter still holds them, so there is no room yet.
        queue.offer(Self.event(6))
        #expect(queue.count == 0)
        #expect(Self.dropped(gaps) == [.exportOverflow: 1])
        queue.release(sizes.reduce(0, +))
        #expect(queue.bytes == 0)
        for n in 7...11 { queue.offer(Self.event(n)) }
        #expect(queue.count == 5)
        #expect(Self.dropped(gaps).isEmpty)
    }

    /// Durable: an event's estimate is swapped for what its unacknowledged publish holds, which
    /// counts against the same bound until it is acknowledged.
    @Test func unacknowledgedPublishesCountAgainstTheSameBound() {
        let gaps = GapBook()
        let queue = ExportQueue(capacity: 100_000, byteCapacity: 1 << 20, gaps: gaps)
        for n in 1...5 { queue.offer(Self.event(n)) }
        var batch: [Event] = [], sizes: [Int] = []
        #expect(queue.take(max: 256, into: &batch, sizes: &sizes))
        let inFlight = Exporter.inFlightBytes(200_050)
        for size in sizes { queue.exchange(released: size, held: inFlight) }
        #expect(queue.bytes == 5 * inFlight)
        queue.offer(Self.event(6))
        #expect(queue.count == 0)
        for _ in 0..<5 { queue.release(inFlight) }  // acknowledged
        #expect(queue.bytes == 0)
        queue.offer(Self.event(7))
        #expect(queue.count == 1)
        #expect(Self.dropped(gaps) == [.exportOverflow: 1])
    }

    @Test func anEventLargerThanTheBoundIsTakenWhenNothingIsHeld() {
        let gaps = GapBook()
        let queue = ExportQueue(capacity: 100_000, byteCapacity: 100_000, gaps: gaps)
        let small = Self.event(2, "s")
        queue.offer(Self.event(1))  // 200 kB, twice the bound: nothing is held, so it is taken
        #expect(queue.count == 1)
        queue.offer(small)  // but nothing else while it is held
        #expect(queue.count == 1)
        var batch: [Event] = [], sizes: [Int] = []
        #expect(queue.take(max: 256, into: &batch, sizes: &sizes))
        queue.offer(small)
        #expect(queue.count == 0)
        queue.release(sizes[0])
        queue.offer(small)
        queue.offer(Self.event(3))  // too large while the small one waits
        #expect(queue.count == 1)
        #expect(Self.dropped(gaps) == [.exportOverflow: 3])
    }

    /// A core subscription posts its batch once it holds a megabyte of payloads, not only at 256
    /// events: nats.c's pending limits do not bound what the delivery thread has gathered.
    @Test func aCoreImportBatchIsFullAtItsBytes() {
        var batch = ImportBatch()
        batch.append(Self.event(1), bytes: 600_000)
        #expect(!batch.isFull)
        batch.append(Self.event(2), bytes: 600_000)
        #expect(batch.isFull)
        batch.removeAll()
        #expect(batch.events.isEmpty && batch.bytes == 0 && !batch.isFull)
        for n in 1...255 { batch.append(Self.event(n, "s"), bytes: 60) }
        #expect(!batch.isFull)
        batch.append(Self.event(256, "s"), bytes: 60)
        #expect(batch.isFull)
    }

    /// The shape cache of each subject keeps keys, not the last event's values: thousands of
    /// subjects would otherwise pin a large event each.
    @Test func theShapeCacheKeepsNoValues() throws {
        let cache = WireFormat.ShapeCache()
        let big = String(repeating: "v", count: 1 << 20)
        let payload = WireFormatShapeTests.payload(sequence: 1, [("n", .int(1)), ("pad", .string(big))])
        let event = try payload.withUnsafeBytes { try WireFormat.decodeEvent($0, name: "app.big", host: "alpha", shapes: cache) }
        #expect(event["pad"]?.stringValue == big)
        #expect(cache.pinnedBytes > 0 && cache.pinnedBytes < 1_024, "pins \(cache.pinnedBytes) bytes")
        // The shape is used: the next payload of the same keys decodes through it, values its own.
        let next = WireFormatShapeTests.payload(sequence: 2, [("pad", .string("small")), ("n", .int(2))])
        let second = try next.withUnsafeBytes { try WireFormat.decodeEvent($0, name: "app.big", host: "alpha", shapes: cache) }
        #expect(second["pad"] == "small" && second["n"] == 2 && second.origin?.sequence == 2 && second.origin?.host == "alpha")

        // Keys too large are not kept at all (the source is, twice); such payloads still decode.
        let longKey = String(repeating: "k", count: 100_000)
        let keyed = WireFormatShapeTests.payload(sequence: 3, [(longKey, .int(3))])
        let third = try keyed.withUnsafeBytes { try WireFormat.decodeEvent($0, name: "app.big", host: "alpha", shapes: cache) }
        #expect(third[longKey] == 3)
        #expect(cache.pinnedBytes == 2 * "tester".utf8.count)
    }

    /// The last source is reused only when its bytes are the same, and a long one is not kept.
    @Test func theShapeCacheKeepsOnlyAShortSource() throws {
        let cache = WireFormat.ShapeCache()
        func source(_ text: String) throws -> String {
            let payload = WireFormatShapeTests.payload(sequence: 1, [("n", .int(1))], source: text)
            return try payload.withUnsafeBytes { try WireFormat.decodeEvent($0, name: "app.s", host: "alpha", shapes: cache) }.source
        }
        #expect(try source("tester") == "tester")
        #expect(try source("tester") == "tester")
        #expect(try source("testes") == "testes")
        #expect(try source("") == "")
        #expect(try source("é") == "é")
        let pinned = cache.pinnedBytes
        let long = String(repeating: "s", count: WireFormat.ShapeCache.sourceBytesLimit + 1)
        #expect(try source(long) == long)
        #expect(cache.pinnedBytes == pinned, "a long source is not kept")
        #expect(try source(long) == long)
        #expect(try source("é") == "é")
    }

    /// A gap keeps up to 16 names per kind; a name can be as long as a request line.
    @Test func aGapKeepsNamesShortened() throws {
        let gaps = GapBook()
        let long = "app." + String(repeating: "é", count: 500_000)
        gaps.record(.exportOverflow, count: 1, subject: long)
        gaps.record(.exportOverflow, count: 1, subject: "app.short")
        let record = try #require(gaps.take().first?.0)
        #expect(record.count == 2)
        #expect(record.subjects.count == 2)
        #expect(record.subjects[0].utf8.count <= GapRecord.subjectBytesLimit && record.subjects[0].hasPrefix("app.éé"))
        #expect(record.subjects[0].hasSuffix("…"))
        #expect(record.subjects[1] == "app.short")
    }
}
