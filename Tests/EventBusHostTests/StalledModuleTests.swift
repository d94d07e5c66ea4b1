import EventBusHost
import EventBusKit
import Foundation
import Logging
import Testing

/// A module that stops taking events, inside the host: it delays nobody, loses only its own
/// events — counted, announced — and holds at most its mailbox's bound of them. Serialized: the
/// stalled fixture has one gate per process, which a test opens with ``StalledFixture/release()``.
@Suite(.serialized) struct StalledModuleTests {
    @Test func aStalledModuleDoesNotDelayOthersAndItsDropsAreCountedAndAnnounced() async throws {
        let harness = try HostTests.Harness("""
            modules:
              stalled:
                path: $FIXTURES/libFixtureStalled.so
                mailbox_capacity: 1000
              counter:
                path: $FIXTURES/libFixtureCounter.so
                mailbox_capacity: 100000
            """)
        try await harness.host.start()
        let bus = harness.host.bus
        var released = false
        defer { if !released { StalledFixture.release() } }

        bus.post("test.first")  // the stalled module blocks on this one
        #expect(await eventually { harness.statistics("stalled")?.delivered == 1 })
        for index in 0..<50_000 { bus.post("test.item", fields: ["i": .int(Int64(index))]) }

        // The other module gets every event while the stalled one is still blocked.
        let counter = try await harness.report("result.counter.counter")
        #expect(counter["count"] == 50_001)
        #expect(counter["gaps"] == 0)
        let stalledStatistics = try #require(harness.statistics("stalled"))
        #expect(stalledStatistics.dropped > 0)
        #expect(stalledStatistics.queued == 1000)  // its mailbox held its bound, no more

        StalledFixture.release()
        released = true
        #expect(await eventually { harness.statistics("stalled")?.queued == 0 })
        let stalled = try await harness.report("result.stalled")
        let dropped = try #require(stalled["dropped"]?.intValue)
        #expect(stalled["gaps"] == 1)  // one run of drops, one notice
        #expect(UInt64(dropped) == harness.statistics("stalled")?.dropped)
        // Everything it was sent: the first event, 50,000 items and the counter's report (dropped
        // too, as it came while the module was stalled) arrived or were counted as dropped.
        #expect(stalled["count"]!.intValue! + dropped == 50_002)
        #expect(await harness.host.shutdown().isClean)
    }

    /// A count alone would let a stalled module pin ten thousand large events (measured: 3 000
    /// posts of 900 kB took eventbusd to 2.7 GB); its mailbox also holds at most its bytes.
    @Test func aStalledModuleHoldsAtMostItsMailboxBytesOfLargeEvents() async throws {
        let harness = try HostTests.Harness("""
            modules:
              stalled:
                path: $FIXTURES/libFixtureStalled.so
                mailbox_bytes: 1MiB
            """)
        try await harness.host.start()
        var released = false
        defer { if !released { StalledFixture.release() } }
        harness.host.bus.post("test.first")  // the stalled module blocks on this one
        #expect(await eventually { harness.statistics("stalled")?.delivered == 1 })
        let large = String(repeating: "x", count: 200_000)
        for index in 0..<100 { harness.host.bus.post("test.large", fields: ["i": .int(Int64(index)), "p": .string(large)]) }

        let held = try #require(harness.statistics("stalled"))
        #expect(held.queued == 5, "five of 200 kB fit in 1 MiB: \(held)")
        #expect(held.queuedBytes > 1_000_000 && held.queuedBytes <= 1 << 20, "\(held)")
        #expect(held.dropped == 95)
        #expect(await eventually { harness.logged(.warning, "module stalled is stalled: its mailbox is full (5 queued, 1.0 MiB)") },
                "\(harness.log.entries.map(\.text))")

        StalledFixture.release()
        released = true
        let stalled = try await harness.report("result.stalled")
        #expect(stalled["count"] == 6)
        #expect(stalled["gaps"] == 1)
        #expect(stalled["dropped"] == 95)
        #expect(harness.statistics("stalled")?.queuedBytes == 0)
        #expect(await harness.host.shutdown().isClean)
    }
}

/// Reaches into the loaded stalled fixture to let it go.
enum StalledFixture {
    static func release() {
        let handle = dlopen(BuildProducts.fixture("FixtureStalled"), RTLD_NOW | RTLD_NOLOAD)
        precondition(handle != nil, "the stalled fixture is not loaded")
        let symbol = dlsym(handle, "fixture_stalled_release")
        precondition(symbol != nil, "fixture_stalled_release missing")
        unsafeBitCast(symbol, to: (@convention(c) () -> Void).self)()
    }
}
