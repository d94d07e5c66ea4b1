import EventBusKit
import Foundation

// Runs one operator misuse that Combine answers with a precondition failure, so a test can watch
// it trap in a child process instead of in (and killing) the test runner.
// usage: operator-trap-fixture MODE
//   combineLatest-request-none  requests .none on a combineLatest subscription: must trap
//   combineLatest-request-one   the same with .max(1): must exit 0 (the control)
//   PATH-request-none           requests .none from a bus publisher through PATH: must trap, as
//                               Combine's operators and subjects do
//   PATH-request-one            the same with .max(1): must exit 0 (the control)
// where PATH is one of the ways a subscriber reaches a bus subscription (see `busPaths`).

/// Unbuffered, so what was said before a trap is not lost with the process.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Keeps the subscription it is given, requests nothing by itself, says each value.
final class Holder<Input>: Subscriber {
    typealias Failure = Never
    let describe: (Input) -> String
    let received = DispatchSemaphore(value: 0)
    var subscription: Subscription?
    init(describe: @escaping (Input) -> String) { self.describe = describe }
    func receive(subscription: Subscription) { self.subscription = subscription }
    func receive(_ input: Input) -> Subscribers.Demand {
        say("value \(describe(input))")
        received.signal()
        return .none
    }
    func receive(completion: Subscribers.Completion<Never>) {}
}

/// Subscribes a holder to `publisher`; returns its subscription and a wait for its first value.
func hold<P: Publisher>(_ publisher: P, _ describe: @escaping (P.Output) -> String)
    -> (subscription: Subscription, firstValue: () -> Bool) where P.Failure == Never {
    let holder = Holder<P.Output>(describe: describe)
    publisher.subscribe(holder)
    guard let subscription = holder.subscription else { exit(3) }
    return (subscription, { holder.received.wait(timeout: .now() + 120) == .success })
}

func n(_ event: Event) -> Int64 { event["n"]?.intValue ?? 0 }

/// Every way a subscriber reaches a bus subscription: bare, on a mailbox's lane, through the
/// bus's own fast-path operators, and through OpenCombine's operators (after type erasure).
let busPaths: [String: (Bus) throws -> (subscription: Subscription, firstValue: () -> Bool)] = [
    "bus": { hold(try $0.publisher(for: "n.*"), { "\(n($0))" }) },
    "mailbox": { hold(try $0.scoped(to: Mailbox(label: "trap-fixture")).publisher(for: "n.*"), { "\(n($0))" }) },
    "filter": { hold(try $0.publisher(for: "n.*").filter { _ in true }, { "\(n($0))" }) },
    "map": { hold(try $0.publisher(for: "n.*").map(n), { "\($0)" }) },
    "compactMap": { hold(try $0.publisher(for: "n.*").compactMap { $0["n"]?.intValue }, { "\($0)" }) },
    "removeDuplicates": { hold(try $0.publisher(for: "n.*").map(n).removeDuplicates(), { "\($0)" }) },
    "combine-filter": { hold(try $0.publisher(for: "n.*").eraseToAnyPublisher().filter { _ in true }, { "\(n($0))" }) },
    "combine-map": { hold(try $0.publisher(for: "n.*").eraseToAnyPublisher().map(n), { "\($0)" }) },
    "combine-compactMap": { hold(try $0.publisher(for: "n.*").eraseToAnyPublisher().compactMap { $0["n"]?.intValue }, { "\($0)" }) },
    "combine-removeDuplicates": { hold(try $0.publisher(for: "n.*").eraseToAnyPublisher().map(n).removeDuplicates(), { "\($0)" }) },
]

let mode = CommandLine.arguments.dropFirst().first ?? ""
for suffix in ["-request-none", "-request-one"] where mode.hasSuffix(suffix) {
    guard let path = busPaths[String(mode.dropLast(suffix.count))] else { break }
    let bus = Bus()
    let (subscription, firstValue) = try path(bus)
    say("subscribed")
    bus.post("n.x", fields: ["n": .int(7)])  // waits in the bus subscription for demand
    subscription.request(suffix == "-request-none" ? .none : .max(1))
    if suffix == "-request-one", !firstValue() { exit(4) }
    say("returned")
    exit(0)
}
let a = PassthroughSubject<Int, Never>(), b = PassthroughSubject<Int, Never>()
let (subscription, _) = hold(a.combineLatest(b), { "\($0.0) \($0.1)" })
say("subscribed")
switch mode {
case "combineLatest-request-none":
    subscription.request(.none)
case "combineLatest-request-one":
    subscription.request(.max(1))
    a.send(1)
    b.send(2)
default:
    let paths = busPaths.keys.sorted().joined(separator: "|")
    FileHandle.standardError.write(Data("usage: operator-trap-fixture (combineLatest|\(paths))-request-(none|one)\n".utf8))
    exit(2)
}
say("returned")
exit(0)
