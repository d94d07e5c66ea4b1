import Foundation
// EventBus benchmarks, each side by side with its anchors measured in the same run.
// Run in release: swift run -c release eventbus-bench [BENCHMARK] [ARGS…]
//   dispatch [deliveries-per-run]   post → N sinks vs raw closures and PassthroughSubject
//   files [files] [directory]       a storm of file creations: the inotify source vs inotifywait
//   tail [events]                   events/s through the control socket to `eventbus tail --json`
//   journal [entries]               journal ingest vs a C loop and journalctl; follow latency
//   bridge [events]                 bus A → NATS → bus B vs a raw nats.c publish → subscribe
let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first ?? "dispatch" {
case "dispatch":
    dispatchBenchmark(eventsPerRun: arguments.dropFirst().first.flatMap(Int.init) ?? 2_000_000)
case "files":
    filesBenchmark(files: arguments.dropFirst().first.flatMap(Int.init) ?? 100_000,
                   base: arguments.dropFirst(2).first ?? (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"))
case "tail":
    await tailBenchmark(events: arguments.dropFirst().first.flatMap(Int.init) ?? 1_000_000)
case "files-storm":  // the files benchmark's writer, run as a child process
    createStorm(in: arguments[1], count: Int(arguments[2])!)
case "journal":
    JournalBenchmark.run(entries: arguments.dropFirst().first.flatMap(Int.init) ?? 1_000_000)
case "bridge":
    BridgeBenchmark.run(events: arguments.dropFirst().first.flatMap(Int.init) ?? 500_000)
case "journal-writer":  // the journal benchmark's latency writer, run as a child process
    JournalBenchmark.writer(socket: arguments[1], count: Int(arguments[2])!)
default:
    print("unknown benchmark \(arguments[0]); available: dispatch, files, tail, journal, bridge")
    exit(2)
}
