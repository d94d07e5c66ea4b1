import Foundation
// EventBus benchmarks, each side by side with its anchors measured in the same run.
// Run in release: swift run -c release eventbus-bench [BENCHMARK] [ARGS…]
//   dispatch [deliveries-per-run]   post → N sinks vs raw closures and PassthroughSubject
let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first ?? "dispatch" {
case "dispatch":
    dispatchBenchmark(eventsPerRun: arguments.dropFirst().first.flatMap(Int.init) ?? 2_000_000)
default:
    print("unknown benchmark \(arguments[0]); available: dispatch")
    exit(2)
}
