import EventBusKit
import Foundation

// Runs one operator misuse that Combine answers with a precondition failure, so a test can watch
// it trap in a child process instead of in (and killing) the test runner.
// usage: operator-trap-fixture MODE
//   combineLatest-request-none  requests .none on a combineLatest subscription: must trap
//   combineLatest-request-one   the same with .max(1): must exit 0 (the control)
//   pipeline-request-none       requests .none through a bus publisher's removeDuplicates (the
//                               bus's own operator path): must trap, as Combine's operators do
//   pipeline-request-one        the same with .max(1): must exit 0 (the control)

/// Unbuffered, so what was said before a trap is not lost with the process.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Keeps the subscription it is given, requests nothing by itself.
final class Holder: Subscriber {
    typealias Input = (Int, Int)
    typealias Failure = Never
    var subscription: Subscription?
    func receive(subscription: Subscription) { self.subscription = subscription }
    func receive(_ input: (Int, Int)) -> Subscribers.Demand {
        say("value \(input.0) \(input.1)")
        return .none
    }
    func receive(completion: Subscribers.Completion<Never>) {}
}

/// The same for a bus pipeline's values.
final class EventHolder: Subscriber {
    typealias Input = Int64
    typealias Failure = Never
    var subscription: Subscription?
    func receive(subscription: Subscription) { self.subscription = subscription }
    func receive(_ input: Int64) -> Subscribers.Demand {
        say("value \(input)")
        return .none
    }
    func receive(completion: Subscribers.Completion<Never>) {}
}

let mode = CommandLine.arguments.dropFirst().first ?? ""
if mode.hasPrefix("pipeline-") {
    let bus = Bus()
    let holder = EventHolder()
    try bus.publisher(for: "n.*").map { $0["n"]?.intValue ?? 0 }.removeDuplicates().subscribe(holder)
    guard let subscription = holder.subscription else { exit(3) }
    say("subscribed")
    bus.post("n.x", fields: ["n": .int(7)])
    subscription.request(mode == "pipeline-request-none" ? .none : .max(1))
    say("returned")
    exit(0)
}
let a = PassthroughSubject<Int, Never>(), b = PassthroughSubject<Int, Never>()
let holder = Holder()
a.combineLatest(b).subscribe(holder)
guard let subscription = holder.subscription else {
    FileHandle.standardError.write(Data("no subscription\n".utf8))
    exit(3)
}
say("subscribed")
switch mode {
case "combineLatest-request-none":
    subscription.request(.none)
case "combineLatest-request-one":
    subscription.request(.max(1))
    a.send(1)
    b.send(2)
default:
    FileHandle.standardError.write(Data("usage: operator-trap-fixture combineLatest-request-none|combineLatest-request-one|pipeline-request-none|pipeline-request-one\n".utf8))
    exit(2)
}
say("returned")
exit(0)
