@testable import EventBusHost
import Testing

/// The four modes as a pure state machine: which triggers start, wait, stop or are skipped.
@Suite struct RuleModeStateTests {
    typealias State = RuleModeState<String>

    /// Decisions as short words, for readable expectations.
    func words(_ decisions: [State.Decision]) -> [String] {
        decisions.map { decision in
            switch decision {
            case .start(let trigger, let run): return "start \(trigger) as \(run)"
            case .stop(let run): return "stop \(run)"
            case .skip(let trigger, let reason): return "skip \(trigger): \(reason.rawValue)"
            }
        }
    }

    @Test func singleSkipsWhileRunning() {
        var state = State(mode: .single)
        #expect(words(state.trigger("a")) == ["start a as 1"])
        #expect(words(state.trigger("b")) == ["skip b: already running"])
        #expect(words(state.finished(1)) == [])
        #expect(words(state.trigger("c")) == ["start c as 2"])
    }

    @Test func restartStopsOnceAndStartsOnlyTheNewestAfterTheStoppedRunEnded() {
        var state = State(mode: .restart)
        #expect(words(state.trigger("a")) == ["start a as 1"])
        #expect(words(state.trigger("b")) == ["stop 1"])
        #expect(words(state.trigger("c")) == ["skip b: superseded by a newer trigger"])
        #expect(words(state.finished(1)) == ["start c as 2"])
        #expect(words(state.trigger("d")) == ["stop 2"])
        #expect(state.running == [2])
    }

    @Test func queuedRunsInOrderAndDropsBeyondItsBound() {
        var state = State(mode: .queued(max: 2))
        #expect(words(state.trigger("a")) == ["start a as 1"])
        #expect(words(state.trigger("b")) == [])
        #expect(words(state.trigger("c")) == [])
        #expect(words(state.trigger("d")) == ["skip d: queue full"])
        #expect(state.queued == 2)
        #expect(words(state.finished(1)) == ["start b as 2"])
        #expect(words(state.finished(2)) == ["start c as 3"])
        #expect(words(state.finished(3)) == [])
    }

    @Test func parallelBoundsRunsAtOnce() {
        var state = State(mode: .parallel(max: 2))
        #expect(words(state.trigger("a")) == ["start a as 1"])
        #expect(words(state.trigger("b")) == ["start b as 2"])
        #expect(words(state.trigger("c")) == ["skip c: at its maximum of parallel runs"])
        #expect(words(state.finished(1)) == [])
        #expect(words(state.trigger("d")) == ["start d as 3"])
    }

    @Test func aRetiredRuleSkipsWhatWaitsAndStartsNothingMoreButLetsRunsEnd() {
        var state = State(mode: .queued(max: 5))
        _ = state.trigger("a")
        _ = state.trigger("b")
        #expect(words(state.retire()) == ["skip b: rule removed or changed"])
        #expect(words(state.trigger("c")) == ["skip c: rule removed or changed"])
        #expect(words(state.finished(1)) == [])
        #expect(state.running.isEmpty)
    }

    /// A seeded walk through random triggers and ends: the bounds hold at every step.
    @Test(arguments: [RuleMode.single, .restart, .queued(max: 3), .parallel(max: 4)])
    func boundsHoldThroughRandomTriggersAndEnds(mode: RuleMode) {
        var state = State(mode: mode)
        var random = SplitMix(seed: 42)
        for step in 0..<5_000 {
            if random.next() % 3 == 0, let run = state.running.randomElement(using: &random) {
                _ = state.finished(run)
            } else {
                _ = state.trigger("t\(step)")
            }
            switch mode {
            case .single, .restart: #expect(state.running.count <= 1)
            case .queued(let max): #expect(state.running.count <= 1 && state.queued <= max)
            case .parallel(let max): #expect(state.running.count <= max)
            }
        }
    }
}
