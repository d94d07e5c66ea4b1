import EventBusKit
import EventFieldCoding
import Foundation
@testable import NATSBridge
import Testing

/// Core mode counts what it misses by numbers: each export is numbered among its instance's
/// exports of its name, and an importer counts the jumps.
@Suite struct ExportNumbersTests {
    /// Numbers per name, 1, 2, 3…, only what is committed; a name comes back where it was.
    @Test func exportsAreNumberedPerName() {
        var numbers = ExportNumbers()
        var taken: [String] = []
        for name in ["a", "a", "b", "a", "b", "b"] {
            let number = numbers.next(for: name)
            numbers.commit()
            taken.append("\(name)\(number)")
        }
        #expect(taken == ["a1", "a2", "b1", "a3", "b2", "b3"])
        // Not committed (nats.c refused it): the next export of the name takes the same number.
        #expect(numbers.next(for: "a") == 4)
        #expect(numbers.next(for: "a") == 4)
    }

    /// Past the limit of names the table starts again: every name from 1, which an importer
    /// takes for a new numbering, not a loss.
    @Test func pastTheLimitOfNamesEveryNameStartsAgain() {
        var numbers = ExportNumbers()
        for index in 0...ExportNumbers.nameLimit {
            _ = numbers.next(for: "n\(index)")
            numbers.commit()
        }
        _ = numbers.next(for: "n0")
        numbers.commit()
        #expect(numbers.next(for: "n1") == 1)
        var received = ReceivedNumbers()
        #expect(received.receive(instance: 9, number: 400) == 0)
        #expect(received.receive(instance: 9, number: 1) == 0)
        #expect(received.receive(instance: 9, number: 2) == 0)
    }

    /// What the importer counts: jumps within an instance; a newer instance's exports before its
    /// first received once an older one was seen; nothing for the first seen, unnumbered
    /// payloads or an older instance.
    @Test func anImporterCountsTheJumps() {
        var received = ReceivedNumbers()
        #expect(received.receive(instance: 7, number: 57) == 0)  // first seen: before it, not missed
        #expect(received.receive(instance: 7, number: 58) == 0)
        #expect(received.receive(instance: 7, number: 70) == 11)
        #expect(received.receive(instance: 7, number: 70) == 0)  // a copy
        #expect(received.receive(instance: 8, number: 5) == 4)  // the origin restarted: its first four missed
        #expect(received.receive(instance: 7, number: 71) == 0)  // an older life, late: ignored
        #expect(received.receive(instance: 8, number: 6) == 0)
        #expect(received.receive(instance: 8, number: 0) == 0)  // version 2: not numbered
        #expect(received.receive(instance: 8, number: 9) == 2)
    }

    /// The number travels in the header; a version 2 payload (without it) is read as 0.
    @Test func theNumberTravelsAndVersionTwoIsStillRead() throws {
        let event = Event(name: "app.sample", source: "tester", fields: ["n": .int(5)])
        var writer = FieldWriter()
        WireFormat.encode(event, instance: 42, previous: 3, number: 12, into: &writer)
        var header = WireFormat.Header(instance: 0, sequence: 0)
        _ = try writer.bytes.withUnsafeBytes { try WireFormat.decode($0, name: "app.sample", host: "alpha", header: &header) }
        #expect(header == WireFormat.Header(instance: 42, sequence: event.sequence, previous: 3, number: 12))
        var version2: [UInt8] = [2]
        EventFieldCoding.appendFixed(42, to: &version2)
        EventFieldCoding.appendFixed(17, to: &version2)
        EventFieldCoding.appendFixed(16, to: &version2)
        EventFieldCoding.appendFixed(event.wallTime.timeIntervalSinceReferenceDate.bitPattern, to: &version2)
        EventFieldCoding.appendString(event.source, to: &version2)
        EventFieldCoding.append(event.fields, to: &version2)
        let decoded = try version2.withUnsafeBytes { try WireFormat.decode($0, name: "app.sample", host: "alpha", header: &header) }
        #expect(header == WireFormat.Header(instance: 42, sequence: 17, previous: 16, number: 0))
        #expect(decoded["n"] == .int(5))
    }
}
