@_exported import TestSupport  // eventually, Collected: shared by every test target
import EventBusKit
import Foundation
import Synchronization



/// A subscriber whose demand the test controls, recording everything it gets and checking that
/// Combine's rules hold: one subscription, nothing beyond demand, nothing after completion, no
/// concurrent calls.
final class RecordingSubscriber: Subscriber, @unchecked Sendable {
    typealias Input = Event
    typealias Failure = Never

    private let lock = NSLock()
    private var _state = State()
    private struct State {
        var subscription: Subscription?
        var subscriptions = 0
        var events: [Event] = []
        var completions = 0
        var outstanding = 0  // Int.max: unlimited
        var violations: [String] = []
        var inside = false
    }

    private func withState<R>(_ body: (inout State) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&_state)
    }

    let initialDemand: Subscribers.Demand
    /// Called with each value (outside the recorder's lock); returns extra demand.
    var onValue: ((Event) -> Subscribers.Demand)?

    init(initialDemand: Subscribers.Demand = .unlimited) {
        self.initialDemand = initialDemand
    }

    var events: [Event] { withState { $0.events } }
    var names: [String] { events.map(\.name) }
    var completions: Int { withState { $0.completions } }
    var violations: [String] { withState { $0.violations } }

    func receive(subscription: Subscription) {
        withState {
            $0.subscriptions += 1
            if $0.subscriptions > 1 { $0.violations.append("second subscription") }
            $0.subscription = subscription
            $0.outstanding = initialDemand.max ?? Int.max
        }
        if initialDemand > .none { subscription.request(initialDemand) }
    }

    func receive(_ input: Event) -> Subscribers.Demand {
        withState {
            if $0.inside { $0.violations.append("concurrent call") }
            $0.inside = true
            if $0.completions > 0 { $0.violations.append("value after completion") }
            if $0.outstanding == 0 { $0.violations.append("value beyond demand: \(input.name)") }
            if $0.outstanding != Int.max { $0.outstanding -= 1 }
            $0.events.append(input)
        }
        let more = onValue?(input) ?? .none
        withState {
            $0.inside = false
            if let n = more.max { if $0.outstanding != Int.max { $0.outstanding += n } } else { $0.outstanding = Int.max }
        }
        return more
    }

    func receive(completion: Subscribers.Completion<Never>) {
        withState {
            $0.completions += 1
            if $0.completions > 1 { $0.violations.append("second completion") }
        }
    }

    func request(_ demand: Subscribers.Demand) {
        let subscription = withState { s -> Subscription? in
            if let n = demand.max, s.outstanding != Int.max { s.outstanding += n } else { s.outstanding = Int.max }
            return s.subscription
        }
        subscription?.request(demand)
    }

    func cancel() {
        withState { $0.subscription }?.cancel()
    }
}
