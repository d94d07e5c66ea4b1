import EventBusKit
import Foundation
import Testing

/// The `rate-summary` module as the root package builds it (`libRateSummary.so`).
@Suite struct RateSummaryModuleTests {
    private func total(_ field: String, in summaries: [Event]) -> Int64 {
        summaries.reduce(0) { $0 + ($1[field]?.intValue ?? 0) }
    }

    @Test func countsEachMatchingEventOncePerWindow() async throws {
        // Overlapping patterns: `app.a` events arrive through both and must count once.
        let harness = try ModuleHarness(library: BuildProducts.library("RateSummary"), config: [
            "match": .array([.string("app.>"), .string("app.a")]), "interval_seconds": .double(0.2),
        ])
        expectLoadedWithOneSDK(harness, name: "rate-summary", type: "RateSummary.RateSummary")
        let summaries = try harness.record("summary.rate")
        let ticks = try harness.record("timer.tick")
        try harness.activate()
        defer { harness.deactivate() }

        let done = try harness.record("user.done")
        for name in ["app.a", "app.b", "app.a", "other.x", "app.b", "app.a"] { harness.bus.post(name) }
        harness.bus.post("user.done")
        #expect(await eventually { done.count == 1 })
        let lastPosted = done.all[0].sequence

        // Each tick closes one window, in bus order: once the module has answered the first tick
        // posted after the events, every event is in a summary, and no later window has any.
        var closing = 0
        #expect(await eventually {
            guard let index = ticks.all.firstIndex(where: { $0.sequence > lastPosted }) else { return false }
            closing = index + 1
            return summaries.count >= closing
        })
        let found = Array(summaries.all.prefix(closing))
        #expect(total("count.app.a", in: found) == 3)
        #expect(total("count.app.b", in: found) == 2)
        #expect(total("total", in: found) == 5)
        #expect(found.allSatisfy { $0["count.other.x"] == nil && $0["count.summary.rate"] == nil })
        #expect(total("dropped", in: found) == 0)
        for summary in found {
            let seconds = try #require(summary["window_seconds"]?.doubleValue)
            let total = try #require(summary["total"]?.doubleValue)
            #expect(seconds > 0)
            #expect(summary["per_second"]?.doubleValue == total / seconds)
        }
        // Read through the SDK's typed view: the ticks the module's timer posted.
        #expect(Set(ticks.all.map { $0.timerTick?.schedule }) == ["every 0.2 seconds"])
    }

    @Test func countsEventsTheBusDroppedForItAsDropped() async throws {
        let harness = try ModuleHarness(library: BuildProducts.library("RateSummary"), config: [
            "match": .array([.string("app.>")]), "interval_seconds": .double(0.05),
        ], mailboxCapacity: 5)
        let summaries = try harness.record("summary.rate")
        try harness.activate()
        defer { harness.deactivate() }

        // Stall the module's mailbox so it overflows: a job in the mailbox itself, which the events
        // queue behind (a block on its queue would wait behind a run of the mailbox already
        // taking them, as while the module's timer ticks).
        let gate = DispatchSemaphore(value: 0), stalled = DispatchSemaphore(value: 0)
        harness.mailbox.perform { stalled.signal(); gate.wait() }
        stalled.wait()
        for _ in 0..<20 { harness.bus.post("app.x") }
        gate.signal()

        #expect(await eventually {
            let found = summaries.all
            return total("count.app.x", in: found) + total("dropped", in: found) == 20
        })
        let found = summaries.all
        #expect(total("dropped", in: found) > 0)
        #expect(total("count.app.x", in: found) <= 5)
    }

    @Test(arguments: [
        (["interval_seconds": ConfigValue.double(0)], EventBusError.Code.invalidModuleConfig),
        (["interval_seconds": .string("10s")], .invalidModuleConfig),
        (["match": .array([.string("app..x")])], .invalidPattern),
    ])
    func refusesBadConfig(_ config: [String: ConfigValue], code: EventBusError.Code) throws {
        let harness = try ModuleHarness(library: BuildProducts.library("RateSummary"), config: config)
        #expect { try harness.activate() } throws: { ($0 as? EventBusError)?.code == code }
    }
}
